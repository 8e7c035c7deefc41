//! Read buffers for the media streams, recycled. A chunk read from the image is handed to the connection as
//! `Bytes` and freed once written; a fresh 1 MiB buffer each time is a fresh mapping from the allocator and 256
//! page faults to fill it, which cost more than the read itself. These buffers go back to a small pool when the
//! connection drops them, so the pages stay mapped. At most [`POOLED`] are kept idle.

use std::sync::Mutex;

use axum::body::Bytes;

/// Idle buffers kept for reuse (their memory stays with the process).
const POOLED: usize = 64;

static IDLE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A buffer of exactly `size` bytes, from the pool when one of that size is idle. Its contents are whatever the
/// last user left: only what a read fills may be handed on.
pub fn take(size: usize) -> Vec<u8> {
    let reused = IDLE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop()
        .filter(|b| b.len() == size);
    reused.unwrap_or_else(|| vec![0u8; size])
}

/// The first `len` bytes of `buf` as `Bytes`; `buf` returns to the pool when the last clone is dropped.
pub fn freeze(buf: Vec<u8>, len: usize) -> Bytes {
    Bytes::from_owner(Chunk { buf, len })
}

struct Chunk {
    buf: Vec<u8>,
    len: usize,
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < POOLED {
            idle.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frozen_chunk_shows_only_its_length_and_its_buffer_is_reused() {
        let mut buf = take(8);
        buf[..3].copy_from_slice(b"abc");
        let bytes = freeze(buf, 3);
        assert_eq!(&bytes[..], b"abc");
        let pointer = bytes.as_ptr();
        drop(bytes);
        // Tests run in parallel in one process: another may take the buffer first, so look for it among a few.
        let again: Vec<Vec<u8>> = (0..POOLED).map(|_| take(8)).collect();
        assert!(
            again.iter().any(|b| b.as_ptr() == pointer),
            "the buffer came back"
        );
    }
}
