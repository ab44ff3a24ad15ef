//! Shardings as plain data, attached to a graph by the sharding layer and
//! printed by lowering.

/// The `mhlo.sharding` strings of a graph's arguments and results.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphShardings {
    /// Number of partitions (mesh devices).
    pub partitions: usize,
    /// One GSPMD sharding per argument.
    pub inputs: Vec<String>,
    /// One GSPMD sharding per result.
    pub outputs: Vec<String>,
}
