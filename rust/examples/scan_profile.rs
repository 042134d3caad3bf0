//! Profiling aid for the envelope scan (not a benchmark suite: see benches/bench_codec.py).
//!
//! `cargo run --release --example scan_profile -- {utf8|skip|strict|scan} FILE...` times N
//! (env, default 2000) passes over each file. On a noisy machine, count instructions
//! instead: `N=20 valgrind --tool=callgrind target/release/examples/scan_profile skip F`.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().expect("usage: scan_profile {utf8|skip|strict|scan} FILE...");
    let n: usize = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    for path in args {
        let line = std::fs::read(&path).expect("readable file");
        let t = Instant::now();
        for _ in 0..n {
            let line = std::hint::black_box(&line[..]);
            match what.as_str() {
                "utf8" => {
                    std::hint::black_box(std::str::from_utf8(line).is_ok());
                }
                "strict" => {
                    let mut c = _codec::json::Cursor::new(line, _codec::json::Mode::Strict);
                    std::hint::black_box(c.skip_value(0).is_ok());
                }
                "skip" => {
                    let mut c = _codec::json::Cursor::new(line, _codec::json::Mode::Fast);
                    std::hint::black_box(c.skip_value(0).is_ok());
                }
                _ => {
                    std::hint::black_box(_codec::scan::scan(line));
                }
            }
        }
        let per = t.elapsed().as_secs_f64() / n.max(1) as f64 * 1e6;
        println!("{what} {path}: {} bytes, {per:.2} us", line.len());
    }
}
