//! The intermediate representation: the traced [`Graph`] (values, nodes,
//! regions), the [`Op`] set with its attribute enums, and shardings, all as
//! plain data. Tracing writes it, lowering and the runtime layers read it;
//! it depends only on dtypes, shapes, errors and config.

mod check;
pub mod graph;
mod mesh_axes;
mod op;
mod sharding;
pub mod tree;

pub use check::CheckSite;
pub use check::{check_outputs, check_slots, CheckSlot};
pub use graph::{Def, Graph, Node, NodeId, Region, RegionId, RegionKind, Value, ValueId};
pub use mesh_axes::MeshAxes;
pub use op::{
    BinaryOp, Comparison, DotDims, GatherDims, Op, ReduceKind, ScatterCombine, ScatterDims, UnaryOp,
};
pub use sharding::GraphShardings;
pub use tree::{Leaf, PathSegment, StaticValue, TreeDef, TreePath};
