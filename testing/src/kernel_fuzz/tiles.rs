//! Tiled loops: `for b in blocks_of(n, size)`, `blocks(n)` (the kernel's
//! block size) or `grid((.., ..))` with a tuple index, traced (one XLA
//! while, chosen by the source's type) or `#[unroll]`ed (block numbers as
//! Rust integers); tiles are read with `block_sized`/`block_or`, virtually
//! padded past the end, summed into a variable declared outside, and now
//! and then written back with `set_block`.

use super::aggregates::Place;
use super::body::{Body, MAX_WORK};
use super::stmt::MAX_CARRIED;
use super::types::{axes_lit, const_dom, float_lit, Dom, Elem, Ex, Ty, Var, F32_VAR};

/// One tiled axis: the loop source, the tile read of block `index`, and
/// the tile's extent.
struct Axis {
    source: String,
    size: usize,
    blocks: usize,
}

impl Body {
    /// How axis `ax` of `x` is tiled: at the kernel's block size, or at an
    /// explicit one (8 or 16; 128 on a TPU kernel's minor axis when that is
    /// smaller than the extent, the TPU rule).
    fn tile_axis(&mut self, x: &Place, ax: usize) -> (Axis, bool) {
        let n = x.shape[ax];
        if self.coin(0.3) {
            let size = self.block.unwrap_or(n);
            let axis = Axis {
                source: format!("blocks({}.dim({ax}))", x.code),
                size,
                blocks: n.div_ceil(size),
            };
            return (axis, true);
        }
        let mut size = self.pick(&[8, 16]);
        if self.tpu && ax + 1 == x.shape.len() && size < n {
            size = 128;
        }
        let axis = Axis {
            source: format!("blocks_of({}.dim({ax}), {size})", x.code),
            size,
            blocks: n.div_ceil(size),
        };
        (axis, false)
    }

    /// The tile read of block `b` along `ax`.
    fn tile_read(
        base: &str,
        ax: usize,
        b: &str,
        axis: &Axis,
        kernel_size: bool,
        pad: f64,
    ) -> String {
        if kernel_size {
            format!("{base}.block_or({ax}, {b}, {})", float_lit(pad))
        } else {
            format!(
                "{base}.block_sized({ax}, {b}, {}, {})",
                axis.size,
                float_lit(pad)
            )
        }
    }

    /// A loop over the tiles of an f32 tensor in scope (one axis, or a
    /// grid over two), summing each into a variable declared outside.
    pub(crate) fn tile_loop(&mut self) {
        let xs: Vec<Place> = self
            .places()
            .into_iter()
            .filter(|p| p.elem == Elem::F32 && !p.shape.is_empty())
            .collect();
        if xs.is_empty() || self.work * 2 > MAX_WORK || self.scope.mutable_tensors() >= MAX_CARRIED
        {
            return self.let_tensor(false);
        }
        let x = self.pick_place(xs);
        let pad = self.pick(&[0.0, -1.0, 0.5]);
        let grid = x.shape.len() == 2 && self.coin(0.3);
        let axes: Vec<usize> = if grid {
            vec![0, 1]
        } else {
            vec![self.below(x.shape.len())]
        };
        let tiled: Vec<(Axis, bool)> = axes.iter().map(|&ax| self.tile_axis(&x, ax)).collect();
        let trips: usize = tiled.iter().map(|(a, _)| a.blocks).product();
        // The accumulator: the tile summed over the tiled axes.
        let acc_shape: Vec<usize> = (0..x.shape.len())
            .filter(|a| !axes.contains(a))
            .map(|a| x.shape[a])
            .collect();
        let acc = self.accumulator(&acc_shape);
        let traced = self.coin(0.7);
        let names: Vec<String> = axes.iter().map(|_| self.fresh("b")).collect();
        let source = if grid {
            format!("grid(({}, {}))", tiled[0].0.source, tiled[1].0.source)
        } else {
            tiled[0].0.source.clone()
        };
        let pat = if grid {
            format!("({}, {})", names[0], names[1])
        } else {
            names[0].clone()
        };
        if !traced {
            self.line("#[unroll]");
        }
        let mut tile = x.code.clone();
        for ((ax, (axis, kernel_size)), b) in axes.iter().zip(&tiled).zip(&names) {
            tile = Body::tile_read(&tile, *ax, b, axis, *kernel_size, pad);
        }
        let size: usize = tiled.iter().map(|(a, _)| a.size).product();
        let tile_dom = Dom::new(
            x.dom.grid.max(const_dom(pad).grid),
            x.dom.mag.max(pad.abs()),
        );
        self.braced(&format!("for {pat} in {source}"), traced, |b| {
            for (name, (axis, _)) in names.iter().zip(&tiled) {
                let ty = if traced {
                    Ty::tensor(&[], Elem::S32)
                } else {
                    Ty::Usize
                };
                b.scope.declare(Var {
                    name: name.clone(),
                    ty,
                    dom: Dom::new(0, axis.blocks as f64),
                    mutable: false,
                    locked: true,
                });
            }
            let sum = Ex::atom(
                format!("{tile}.sum({})", axes_lit(&axes)),
                Ty::tensor(&acc_shape, Elem::F32),
                Dom::new(tile_dom.grid, tile_dom.mag * size as f64),
            );
            let total = Ex::compound(
                format!("{} + {}", acc.name, sum.operand()),
                sum.ty.clone(),
                Dom::new(sum.dom.grid.max(3), sum.dom.mag + 64.0),
            );
            let total = b.fit(total, F32_VAR);
            b.line(format!("{} = {};", acc.name, total.code));
            b.scope.note_assign(&acc.name);
            b.work *= trips.max(1);
            let n = b.below(3);
            b.with_exits(false, false, |b| b.block(n));
            if !grid {
                b.write_tile(&x, axes[0], &names[0], &tiled[0], pad);
            }
            b.work /= trips.max(1);
        });
        self.close("}");
    }

    fn pick_place(&mut self, mut xs: Vec<Place>) -> Place {
        let i = self.below(xs.len());
        xs.swap_remove(i)
    }

    /// A mutable f32 tensor of `shape` declared outside the loop: one in
    /// scope, or a new zero one.
    fn accumulator(&mut self, shape: &[usize]) -> Var {
        let ty = Ty::tensor(shape, Elem::F32);
        let vars: Vec<Var> = self
            .scope
            .assignable()
            .into_iter()
            .filter(|v| v.ty == ty)
            .collect();
        if !vars.is_empty() && self.coin(0.5) {
            return self.pick(&vars);
        }
        let name = self.fresh("v");
        let zeros = if shape.is_empty() {
            "Tensor::scalar(0.0, F32)".to_string()
        } else {
            format!("Tensor::zeros({}, F32)", super::types::shape_lit(shape))
        };
        self.line(format!("let mut {name} = {zeros};"));
        let v = Var {
            name,
            ty,
            dom: F32_VAR,
            mutable: true,
            locked: false,
        };
        self.scope.declare(v.clone());
        v
    }

    /// Now and then `y = y.set_block(ax, b, <tile>)` on a variable of `x`'s
    /// type (the last, ragged block writes only its in-range part).
    fn write_tile(&mut self, x: &Place, ax: usize, b: &str, axis: &(Axis, bool), pad: f64) {
        let ty = Ty::tensor(&x.shape, Elem::F32);
        let ys: Vec<Var> = self
            .scope
            .assignable()
            .into_iter()
            .filter(|v| v.ty == ty)
            .collect();
        if ys.is_empty() || self.coin(0.5) {
            return;
        }
        let y = self.pick(&ys);
        let tile = Body::tile_read(&x.code, ax, b, &axis.0, axis.1, pad);
        let c = self.pick(&[2.0, -1.0, 0.5]);
        let mut shape = x.shape.clone();
        shape[ax] = axis.0.size;
        let value = Ex::compound(
            format!("{tile} * {}", float_lit(c)),
            Ty::tensor(&shape, Elem::F32),
            Dom::new(x.dom.grid + 1, x.dom.mag.max(1.0) * 2.0),
        );
        let value = self.fit(value, F32_VAR);
        self.line(format!(
            "{} = {}.set_block({ax}, {b}, {});",
            y.name, y.name, value.code
        ));
        self.scope.note_assign(&y.name);
    }
}
