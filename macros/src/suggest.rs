//! Did-you-mean suggestions and word lists for error messages.

/// The closest allowed word to `word`, if it is close: at most two edits
/// away, or a third of the candidate's length for long words.
pub fn did_you_mean<'a>(word: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (edit_distance(word, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

/// Levenshtein distance between `a` and `b`, counted in chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `"a", "b", "c"`: the words quoted and comma-separated.
pub fn quoted_list(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_words_only() {
        let allowed = ["precision", "block_size", "dtype"];
        assert_eq!(did_you_mean("precison", &allowed), Some("precision"));
        assert_eq!(did_you_mean("dtpye", &allowed), Some("dtype"));
        assert_eq!(did_you_mean("tile", &allowed), None);
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn lists_quoted_words() {
        assert_eq!(quoted_list(&["a", "b"]), "\"a\", \"b\"");
    }
}
