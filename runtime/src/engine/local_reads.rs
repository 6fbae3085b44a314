//! How Lance reads the files of a local warehouse: through io_uring where the kernel allows it.
//!
//! Lance's default local reader hands every read (a vector search makes about a hundred of
//! 512 bytes) to a blocking thread and back. Its io_uring reader (`file+uring://`) submits them
//! from one ring thread instead: a prepared top-10 search at 1M × 128 uses about a fifth less
//! CPU and answers 1–2 ms sooner (docs/performance.md). Only reads change: a query process
//! holds no write path, and the metadata process keeps Lance's own local writes.

use std::sync::OnceLock;

/// The reader a query process opens local datasets with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalReads {
    /// Lance's default: each read on the blocking thread pool.
    Blocking,
    /// Lance's io_uring reader.
    IoUring,
}

/// `blocking` keeps Lance's default reader (say, where a security policy rules io_uring out
/// even though the kernel offers it).
use lake_common::config::LAKE_LOCAL_READS as LOCAL_READS_ENV;
/// Lance's switch to an io_uring ring per calling thread: that mode panics on a multi-threaded
/// runtime (measured: the server died on its first search), so with it set, lake never asks for
/// io_uring.
const LANCE_CURRENT_THREAD_ENV: &str = "LANCE_URING_CURRENT_THREAD";

/// Lance's io_uring threads wait this long for a read while idle, then wake only to log (a read
/// arriving wakes them at once, whatever it is). Lance's 10 ms made an idle lake switch context
/// about 200 times a second for good (measured); lake's default is a second.
const IDLE_POLL_ENV: &str = "LANCE_URING_POLL_TIMEOUT_MS";
const IDLE_POLL_MS: &str = "1000";

/// Lake's defaults for Lance's io_uring settings, where the environment sets none. Call at the
/// top of `main`, before the process starts a thread.
pub fn default_lance_settings() {
    if std::env::var_os(IDLE_POLL_ENV).is_none() {
        // SAFETY: `main` calls this before it starts any thread (the runtime, the tracing
        // writer, Lance's pools): nothing can read the environment at the same time.
        unsafe { std::env::set_var(IDLE_POLL_ENV, IDLE_POLL_MS) };
    }
}

impl LocalReads {
    /// The reader for this process: io_uring when it works here, decided once and logged.
    pub fn detected() -> Self {
        static CHOSEN: OnceLock<LocalReads> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let (reads, why) = Self::choose(
                std::env::var(LOCAL_READS_ENV).ok().as_deref(),
                std::env::var(LANCE_CURRENT_THREAD_ENV).ok().as_deref(),
                probe,
            );
            tracing::info!(reads = ?reads, "local reads: {why}");
            reads
        })
    }

    /// The choice, given the two variables and a probe of io_uring (run only when needed).
    fn choose(
        setting: Option<&str>,
        lance_current_thread: Option<&str>,
        probe: impl FnOnce() -> std::io::Result<()>,
    ) -> (Self, String) {
        match setting.map(str::trim) {
            None | Some("") => {}
            Some(s) if s.eq_ignore_ascii_case("auto") => {}
            Some(s) if s.eq_ignore_ascii_case("blocking") => {
                return (Self::Blocking, format!("{LOCAL_READS_ENV}=blocking"));
            }
            Some(other) => {
                return (
                    Self::Blocking,
                    format!("{LOCAL_READS_ENV}={other:?} is neither auto nor blocking"),
                );
            }
        }
        if lance_current_thread.is_some_and(is_truthy) {
            return (
                Self::Blocking,
                format!(
                    "{LANCE_CURRENT_THREAD_ENV} is set (that mode needs a current-thread runtime)"
                ),
            );
        }
        match probe() {
            Ok(()) => (Self::IoUring, "io_uring".to_owned()),
            Err(e) => (
                Self::Blocking,
                format!("io_uring is not available here ({e})"),
            ),
        }
    }
}

/// Lance's own reading of a truthy variable.
fn is_truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "y" | "on"
    )
}

/// Does what Lance's reader does: sets up a ring and reads through it (four bytes of this
/// executable). A kernel or seccomp profile that refuses io_uring fails here, not in a query.
#[cfg(target_os = "linux")]
pub(super) fn probe() -> std::io::Result<()> {
    use std::io::Error;
    use std::os::fd::AsRawFd;

    let mut ring = io_uring::IoUring::new(2)?;
    let file = std::fs::File::open(std::env::current_exe()?)?;
    let mut buf = [0u8; 4];
    let read = io_uring::opcode::Read::new(
        io_uring::types::Fd(file.as_raw_fd()),
        buf.as_mut_ptr(),
        buf.len() as u32,
    )
    .offset(0)
    .build()
    .user_data(1);
    // SAFETY: `buf` and `file` outlive the operation: it completes (submit_and_wait) before
    // either is dropped, and the ring is dropped with this function.
    unsafe { ring.submission().push(&read) }.map_err(|e| Error::other(e.to_string()))?;
    ring.submit_and_wait(1)?;
    let done = ring
        .completion()
        .next()
        .ok_or_else(|| Error::other("no completion"))?;
    match done.result() {
        n if n < 0 => Err(Error::from_raw_os_error(-n)),
        4 if buf == *b"\x7fELF" => Ok(()),
        n => Err(Error::other(format!(
            "a read through the ring returned {n} bytes, not the file's first four"
        ))),
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn probe() -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "io_uring is Linux's",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never() -> std::io::Result<()> {
        panic!("probed although the choice was already made")
    }

    #[test]
    fn the_setting_and_lances_mode_keep_the_blocking_reader() {
        assert_eq!(
            LocalReads::choose(Some("blocking"), None, never).0,
            LocalReads::Blocking
        );
        assert_eq!(
            LocalReads::choose(Some("BLOCKING"), None, never).0,
            LocalReads::Blocking
        );
        let (reads, why) = LocalReads::choose(Some("uring"), None, never);
        assert_eq!(reads, LocalReads::Blocking);
        assert!(why.contains("neither auto nor blocking"), "{why}");
        assert_eq!(
            LocalReads::choose(None, Some("true"), never).0,
            LocalReads::Blocking
        );
        assert_eq!(
            LocalReads::choose(None, Some("1"), never).0,
            LocalReads::Blocking
        );
    }

    #[test]
    fn io_uring_is_used_when_the_probe_reads() {
        assert_eq!(
            LocalReads::choose(None, None, || Ok(())).0,
            LocalReads::IoUring
        );
        assert_eq!(
            LocalReads::choose(Some("auto"), Some("0"), || Ok(())).0,
            LocalReads::IoUring
        );
        let (reads, why) = LocalReads::choose(None, None, || {
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        });
        assert_eq!(reads, LocalReads::Blocking);
        assert!(why.contains("not available"), "{why}");
    }

    /// The probe on this machine agrees with a ring Lance would build: where io_uring works,
    /// it reads the executable's ELF magic through it.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_probe_matches_what_the_kernel_allows() {
        let ring = io_uring::IoUring::new(2);
        match probe() {
            Ok(()) => assert!(ring.is_ok()),
            Err(e) => assert!(ring.is_err(), "a ring builds, but the probe failed: {e}"),
        }
    }
}
