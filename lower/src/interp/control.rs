//! `while` and `if`: regions run on the carried values (shared, never
//! copied) and on the values of enclosing regions.

use std::rc::Rc;

use crate::error::Result;
use crate::interp::value::Val;
use crate::interp::Interp;
use crate::ir::NodeId;

impl Interp<'_> {
    /// The regions of node `id`, which must number `n`.
    fn regions_of(&self, id: NodeId, n: usize) -> Result<Vec<usize>> {
        let rs = &self.g.nodes[id].regions;
        if rs.len() != n {
            return Err(self.fail(Some(id), format!("needs {n} regions, has {}", rs.len())));
        }
        Ok(rs.clone())
    }

    /// The value of a scalar `pred` that steers control flow.
    fn predicate(&self, id: NodeId, v: Option<&Rc<Val>>) -> Result<bool> {
        match v {
            Some(p) if p.dtype.is_pred() && p.len() == 1 => Ok(p.i64_at(0) != 0),
            Some(p) => Err(self.fail(
                Some(id),
                format!("a condition must be a scalar pred, got {}", p.spec()),
            )),
            None => Err(self.fail(Some(id), "a condition region returns nothing")),
        }
    }

    /// `while`: runs the body region while the condition region gives true.
    pub(crate) fn while_loop(&mut self, id: NodeId, init: Vec<Rc<Val>>) -> Result<Vec<Rc<Val>>> {
        let rs = self.regions_of(id, 2)?;
        let mut carry = init;
        let mut iterations = 0u64;
        loop {
            let c = self.region(rs[0], &carry, Some(id))?;
            if !self.predicate(id, c.first())? {
                return Ok(carry);
            }
            if let Some(max) = self.checks.max_loop_iterations {
                if iterations >= max {
                    let m = format!(
                        "the loop ran more than {max} iterations (Checks::max_loop_iterations)"
                    );
                    return Err(self.fail(Some(id), m));
                }
            }
            iterations += 1;
            carry = self.region(rs[1], &carry, Some(id))?;
        }
    }

    /// `if`: runs the then-region when the predicate holds, else the else-region.
    pub(crate) fn branch(&mut self, id: NodeId, ops: &[Rc<Val>]) -> Result<Vec<Rc<Val>>> {
        let rs = self.regions_of(id, 2)?;
        let taken = if self.predicate(id, ops.first())? {
            rs[0]
        } else {
            rs[1]
        };
        self.region(taken, &[], Some(id))
    }
}
