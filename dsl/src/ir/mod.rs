//! The intermediate representation, from tessel-ir (the traced graph, the
//! op set, shardings, the data of trees), with the tree traits of this
//! crate in [`tree`].

pub mod tree;

pub use tessel_ir::ir::*;
pub use tree::{Tree, TreeValue};
