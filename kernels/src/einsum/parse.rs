//! Parsing an einsum equation against its operands' shapes: labels,
//! ellipsis axes (broadcast as numpy does), the implicit output.

/// Labels are bytes: ASCII letters as written, and `ELLIPSIS + k` for the
/// `k`-th axis an ellipsis stands for, counted from the right (so that
/// ellipses of different lengths align on their last axes, as numpy's
/// broadcasting does).
pub(super) const ELLIPSIS: u8 = 0x80;

/// The most axes an ellipsis may stand for.
const MAX_ELLIPSIS_AXES: usize = 64;

/// A parsed equation: one label list per input and the output's, and each
/// label's extent (the broadcast extent for an ellipsis axis).
#[derive(Debug)]
pub(super) struct Equation {
    pub inputs: Vec<Vec<u8>>,
    pub output: Vec<u8>,
    pub extent: [usize; 256],
}

impl Equation {
    /// The extent of label `l`.
    pub fn size(&self, l: u8) -> usize {
        self.extent[l as usize]
    }
}

/// How a label reads in a message: the letter, or `...[k]`.
pub(super) fn show(l: u8) -> String {
    if l >= ELLIPSIS {
        format!("...[{}]", l - ELLIPSIS)
    } else {
        (l as char).to_string()
    }
}

fn labels_of(term: &str, what: &str) -> Result<Vec<u8>, String> {
    term.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                Ok(c as u8)
            } else {
                Err(format!(
                    "bad character {c:?} in {what} {term:?}; labels are ASCII letters (and one '...' per \
                     term), terms are separated by ',' and the output follows '->'"
                ))
            }
        })
        .collect()
}

/// The labels of input term `i` for an operand of `shape`: its letters,
/// with its `...` (at most one) standing for the axes they leave.
fn term_labels(term: &str, i: usize, shape: &[usize]) -> Result<Vec<u8>, String> {
    let (what, rank) = (format!("input term {i}"), shape.len());
    let Some((head, tail)) = term.split_once("...") else {
        let labels = labels_of(term, &what)?;
        if labels.len() != rank {
            return Err(format!(
                "{what} {term:?} names {} axes, but operand {i} has rank {rank} (shape {shape:?})",
                labels.len()
            ));
        }
        return Ok(labels);
    };
    let (head, tail) = (labels_of(head, &what)?, labels_of(tail, &what)?);
    let named = head.len() + tail.len();
    if named > rank {
        return Err(format!(
            "{what} {term:?} names {named} axes besides '...', but operand {i} has rank {rank} \
             (shape {shape:?})"
        ));
    }
    let n = rank - named;
    if n > MAX_ELLIPSIS_AXES {
        return Err(format!(
            "'...' stands for {n} axes, at most {MAX_ELLIPSIS_AXES}"
        ));
    }
    let mut labels = head;
    labels.extend((0..n).rev().map(|k| ELLIPSIS + k as u8));
    labels.extend(tail);
    Ok(labels)
}

/// Parses `eq` for operands of the given shapes and checks it against them.
pub(super) fn parse(eq: &str, shapes: &[Vec<usize>]) -> Result<Equation, String> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != shapes.len() {
        // Characters first: a stray separator reads better as such.
        for (i, t) in terms.iter().enumerate() {
            labels_of(&t.replace("...", ""), &format!("input term {i}"))?;
        }
        return Err(format!(
            "{} input terms for {} operand{}",
            terms.len(),
            shapes.len(),
            if shapes.len() == 1 { "" } else { "s" }
        ));
    }
    let mut inputs = Vec::with_capacity(terms.len());
    for (i, (t, shape)) in terms.iter().zip(shapes).enumerate() {
        inputs.push(term_labels(t, i, shape)?);
    }
    let mut extent = [0usize; 256];
    let mut seen = [false; 256];
    for (labels, shape) in inputs.iter().zip(shapes) {
        for (&l, &n) in labels.iter().zip(shape) {
            let i = l as usize;
            if !seen[i] {
                (seen[i], extent[i]) = (true, n);
            } else if extent[i] != n {
                // Ellipsis axes broadcast: an extent of 1 meets any other.
                if l >= ELLIPSIS && (extent[i] == 1 || n == 1) {
                    extent[i] = extent[i].max(n);
                } else {
                    return Err(format!(
                        "label '{}' has extent {} in one place and {n} in another",
                        show(l),
                        extent[i]
                    ));
                }
            }
        }
    }
    let ellipsis: Vec<u8> = (0..=255u8)
        .rev()
        .filter(|&l| l >= ELLIPSIS && seen[l as usize])
        .collect();
    let count = |l: u8| inputs.iter().flatten().filter(|&&x| x == l).count();
    let output = match rhs {
        Some(r) => {
            let mut out = match r.split_once("...") {
                Some((head, tail)) => {
                    let mut out = labels_of(head, "the output")?;
                    out.extend(&ellipsis);
                    out.extend(labels_of(tail, "the output")?);
                    out
                }
                None => labels_of(r, "the output")?,
            };
            for (i, &l) in out.iter().enumerate() {
                if !seen[l as usize] {
                    return Err(format!(
                        "output label '{}' does not occur in any input",
                        show(l)
                    ));
                }
                if out[..i].contains(&l) {
                    return Err(format!("output label '{}' is repeated", show(l)));
                }
            }
            out.shrink_to_fit();
            out
        }
        None => {
            let mut letters: Vec<u8> = inputs
                .iter()
                .flatten()
                .copied()
                .filter(|&l| l < ELLIPSIS && count(l) == 1)
                .collect();
            letters.sort_unstable();
            let mut out = ellipsis;
            out.extend(letters);
            out
        }
    };
    Ok(Equation {
        inputs,
        output,
        extent,
    })
}
