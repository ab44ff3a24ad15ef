//! The collectives of a `shard_map` program in StableHLO's generic syntax:
//! cross-replica ops whose device groups are replica ids.

use crate::ir::{Op, ReduceKind};
use crate::lower::attrs::reduce_combiner;
use crate::lower::{combiner_region, scalar_type, Printer, RegionText};
use crate::shape::TensorSpec;

/// A dense `i64` matrix attribute: `dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>`.
fn matrix(rows: &[Vec<usize>]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let body: Vec<String> = rows
        .iter()
        .map(|r| {
            let items: Vec<String> = r.iter().map(usize::to_string).collect();
            format!("[{}]", items.join(", "))
        })
        .collect();
    format!(
        "dense<[{}]> : tensor<{}x{cols}xi64>",
        body.join(", "),
        rows.len()
    )
}

/// The name, attributes and regions of collective `op` on an operand of
/// type `operand`; `None` for any other op.
pub(crate) fn collective_parts(
    p: &mut Printer,
    op: &Op,
    operand: Option<&TensorSpec>,
    indent: usize,
) -> Option<(String, String, Vec<RegionText>)> {
    let region = |p: &mut Printer, kind: ReduceKind| {
        let st = operand.map(scalar_type).unwrap_or_default();
        vec![RegionText::Text(combiner_region(
            p,
            reduce_combiner(kind),
            &st,
            indent,
        ))]
    };
    Some(match op {
        Op::AllReduce { kind, groups } => (
            "stablehlo.all_reduce".into(),
            format!("replica_groups = {}", matrix(groups)),
            region(p, *kind),
        ),
        Op::AllGather { dim, groups } => (
            "stablehlo.all_gather".into(),
            format!(
                "all_gather_dim = {dim} : i64, replica_groups = {}",
                matrix(groups)
            ),
            vec![],
        ),
        Op::ReduceScatter { kind, dim, groups } => (
            "stablehlo.reduce_scatter".into(),
            format!(
                "scatter_dimension = {dim} : i64, replica_groups = {}",
                matrix(groups)
            ),
            region(p, *kind),
        ),
        Op::AllToAll {
            split_dim,
            concat_dim,
            groups,
        } => (
            "stablehlo.all_to_all".into(),
            format!(
                "split_dimension = {split_dim} : i64, concat_dimension = {concat_dim} : i64, \
                 split_count = {} : i64, replica_groups = {}",
                groups.first().map_or(1, Vec::len),
                matrix(groups)
            ),
            vec![],
        ),
        Op::CollectivePermute { pairs } => {
            let rows: Vec<Vec<usize>> = pairs.iter().map(|&(a, b)| vec![a, b]).collect();
            (
                "stablehlo.collective_permute".into(),
                format!("source_target_pairs = {}", matrix(&rows)),
                vec![],
            )
        }
        Op::ReplicaId => ("stablehlo.replica_id".into(), String::new(), vec![]),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::matrix;

    #[test]
    fn groups_print_as_dense_matrices() {
        assert_eq!(
            matrix(&[vec![0, 1], vec![2, 3]]),
            "dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>"
        );
        assert_eq!(matrix(&[vec![3, 0]]), "dense<[[3, 0]]> : tensor<1x2xi64>");
    }
}
