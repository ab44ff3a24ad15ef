//! What the generator knows about the values of a kernel body: element
//! types, the numeric domain of a float or integer value (so every value a
//! later op reads is exact), the type of each variable, and expressions as
//! source text with their type.

/// The element type of a generated tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    F32,
    S32,
    Pred,
}

impl Elem {
    /// The name of the dtype constant in the prelude.
    pub(crate) fn dtype(self) -> &'static str {
        match self {
            Elem::F32 => "F32",
            Elem::S32 => "S32",
            Elem::Pred => "PRED",
        }
    }
}

/// The values a number may take: multiples of `2^-grid` with magnitude at
/// most `mag`. An f32 value in a domain with `mag * 2^grid <= 2^24` is
/// exact, and so is every sum, difference and product the generator builds
/// from such values: both sides compute it without rounding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Dom {
    pub grid: u32,
    pub mag: f64,
}

/// The domain every mutable f32 variable is kept in (assignments are
/// normalized into it).
pub(crate) const F32_VAR: Dom = Dom { grid: 3, mag: 64.0 };
/// The domain every mutable s32 variable is kept in.
pub(crate) const S32_VAR: Dom = Dom {
    grid: 0,
    mag: 1024.0,
};
/// The domain of a `pred` (0 or 1).
pub(crate) const BIT: Dom = Dom { grid: 0, mag: 1.0 };

impl Dom {
    /// A domain.
    pub(crate) fn new(grid: u32, mag: f64) -> Dom {
        Dom { grid, mag }
    }

    /// Whether f32 holds every value of the domain exactly.
    pub(crate) fn exact(self) -> bool {
        self.mag * f64::from(1u32 << self.grid.min(30)) <= f64::from(1u32 << 24)
    }

    /// The smallest domain holding both.
    pub(crate) fn join(self, o: Dom) -> Dom {
        Dom::new(self.grid.max(o.grid), self.mag.max(o.mag))
    }

    /// Whether every value of `self` is a value of `o`.
    pub(crate) fn within(self, o: Dom) -> bool {
        self.grid <= o.grid && self.mag <= o.mag
    }
}

/// The domain of the constant `c` (a multiple of a power of two).
pub(crate) fn const_dom(c: f64) -> Dom {
    let mut grid = 0;
    while (c * f64::from(1u32 << grid)).fract() != 0.0 && grid < 20 {
        grid += 1;
    }
    Dom::new(grid, c.abs())
}

/// The type of a variable of a generated body.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ty {
    /// A traced tensor.
    Tensor { shape: Vec<usize>, elem: Elem },
    /// A Rust `usize` (known while tracing).
    Usize,
    /// A Rust `f32`.
    Float,
    /// A Rust `bool`.
    Bool,
    /// A tuple of tensors.
    Tuple(Vec<(Vec<usize>, Elem)>),
    /// An array of `len` tensors of one type.
    Array {
        shape: Vec<usize>,
        elem: Elem,
        len: usize,
    },
    /// A `move` closure from one tensor to another: argument and result
    /// shapes and element types.
    Closure {
        arg: (Vec<usize>, Elem),
        ret: (Vec<usize>, Elem),
    },
}

impl Ty {
    /// Whether a traced branch or loop that assigns a variable of this type
    /// carries it (tensors, and tuples and arrays of them).
    pub(crate) fn carried(&self) -> bool {
        matches!(self, Ty::Tensor { .. } | Ty::Tuple(_) | Ty::Array { .. })
    }

    /// A tensor type.
    pub(crate) fn tensor(shape: &[usize], elem: Elem) -> Ty {
        Ty::Tensor {
            shape: shape.to_vec(),
            elem,
        }
    }
}

/// A variable in scope.
#[derive(Clone, Debug)]
pub(crate) struct Var {
    pub name: String,
    pub ty: Ty,
    /// The values it may hold (for a `usize`, `mag` is its largest value).
    pub dom: Dom,
    pub mutable: bool,
    /// Assigned only by the statement that made it (a loop counter), never
    /// by a random assignment.
    pub locked: bool,
}

/// An expression: its source text, whether it needs parentheses as an
/// operand, and its type and domain.
#[derive(Clone, Debug)]
pub(crate) struct Ex {
    pub code: String,
    /// A path, literal, call or method chain: no parentheses needed.
    pub atom: bool,
    pub ty: Ty,
    pub dom: Dom,
}

impl Ex {
    /// An atomic expression.
    pub(crate) fn atom(code: impl Into<String>, ty: Ty, dom: Dom) -> Ex {
        Ex {
            code: code.into(),
            atom: true,
            ty,
            dom,
        }
    }

    /// A compound expression (an operator application).
    pub(crate) fn compound(code: impl Into<String>, ty: Ty, dom: Dom) -> Ex {
        Ex {
            code: code.into(),
            atom: false,
            ty,
            dom,
        }
    }

    /// The text as an operand: parenthesized unless atomic.
    pub(crate) fn operand(&self) -> String {
        if self.atom {
            self.code.clone()
        } else {
            format!("({})", self.code)
        }
    }

    /// The tensor shape (empty for Rust values).
    pub(crate) fn shape(&self) -> &[usize] {
        match &self.ty {
            Ty::Tensor { shape, .. } => shape,
            _ => &[],
        }
    }

    /// The element type (`F32` for Rust values, which are never asked).
    pub(crate) fn elem(&self) -> Elem {
        match &self.ty {
            Ty::Tensor { elem, .. } => *elem,
            _ => Elem::F32,
        }
    }
}

/// A float literal as Rust source (always with a decimal point).
pub(crate) fn float_lit(c: f64) -> String {
    if c.fract() == 0.0 {
        format!("{c:.1}")
    } else {
        format!("{c}")
    }
}

/// `[a, b]` for a shape.
pub(crate) fn shape_lit(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// `&[0, 1]` for the axes of a reduction.
pub(crate) fn axes_lit(axes: &[usize]) -> String {
    let parts: Vec<String> = axes.iter().map(usize::to_string).collect();
    format!("&[{}]", parts.join(", "))
}
