//! `trunkline._codec`: the Rust core every byte of MCP traffic passes through.
//!
//! Bytes in, bytes and small tuples out. Each job lives in its own module, all of them
//! free of Python so `cargo test` needs no interpreter:
//!
//! - [`splitter`]: newline framing over whole read buffers, memory-bounded;
//! - [`skim`]: the top-level `id` of a line too long to keep, learned as it is discarded;
//! - [`json`]: the allocation-free JSON cursor (skip, check, decode the few fields we need);
//! - [`decode`]: a whole value decoded in one strict pass, into what a builder makes
//!   (Python objects, in `py`);
//! - [`scan`]: JSON-RPC envelope classification without decoding the payload;
//! - [`stamp`]: request stamping (`_meta` splicing) and the other line encoders;
//! - [`correlate`]: pending ids -> tokens, with stale-reply detection;
//! - [`decoder`]: split + scan of one read buffer, the batch API's pure half, and the
//!   routing of replies to forwarded calls into RESULT frames;
//! - [`frames`]: the parent <-> worker channel (frame splitting, SUBMIT stamping, RESULT
//!   demultiplexing);
//! - [`http_head`]: an HTTP request's header names and values as the gateway's server
//!   looks them up (lower-case names, values without the whitespace around them);
//! - [`wide_int`]: where a JSON document holds an integer beyond 64 bits, which a 64-bit
//!   decoder would silently read as a float;
//! - `py` (feature `python`): the PyO3 bindings described by `_codec.pyi`, with
//!   `py_json`, the builder that makes [`decode`]'s values Python objects.

pub mod correlate;
pub mod decode;
pub mod decoder;
pub mod frames;
pub mod http_head;
pub mod json;
pub mod scan;
pub mod skim;
pub mod splitter;
pub mod stamp;
mod strscan;
pub mod wide_int;

#[cfg(feature = "python")]
mod py;
#[cfg(feature = "python")]
mod py_json;

/// What several modules' tests share.
#[cfg(test)]
pub(crate) mod testing {
    /// A small deterministic pseudo-random generator (xorshift64) for randomized tests
    /// that must fail the same way every run.
    pub fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut state = seed;
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }
}
