//! Progress of a long command on stderr: a bar on a terminal, one plain
//! line per step otherwise (logs and pipes keep a readable record).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress over a known number of steps.
pub struct Progress {
    bar: ProgressBar,
    total: usize,
}

impl Progress {
    /// Progress over `total` steps.
    pub fn new(total: usize) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("[{bar:20}] {pos}/{len} {msg} ({elapsed})")
        {
            bar.set_style(style.progress_chars("#>-"));
        }
        Progress { bar, total }
    }

    /// Step `name` begins; `what` says what it does (may be empty).
    pub fn start(&self, name: &str, what: &str) {
        let what = if what.is_empty() {
            String::new()
        } else {
            format!(": {what}")
        };
        if self.bar.is_hidden() {
            let next = self.bar.position() + 1;
            eprintln!("[{next}/{}] {name}{what} ...", self.total);
        } else {
            self.bar.set_message(format!("{name}{what}"));
        }
    }

    /// The step begun last is done.
    pub fn done(&self) {
        self.bar.inc(1);
    }

    /// Every step is done.
    pub fn finish(&self) {
        if self.bar.is_hidden() {
            eprintln!("[{}/{}] done", self.total, self.total);
        } else {
            self.bar.finish_with_message("done");
        }
    }
}
