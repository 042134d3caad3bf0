//! The pure half of the batch API: one read buffer in, every complete line split and
//! scanned. Correlation needs the (Python-owned) tokens, so it happens afterwards, in
//! [`crate::py`], once the GIL is held again.

use crate::scan::{scan, Envelope};
use crate::splitter::{Frame, LineSplitter};

/// One line of a read buffer and what the scan found (`None` for an oversized line).
#[derive(Debug)]
pub struct Scanned {
    pub frame: Frame,
    pub env: Option<Envelope>,
}

fn scan_frames(frames: Vec<Frame>, chunk: &[u8]) -> Vec<Scanned> {
    frames
        .into_iter()
        .map(|frame| {
            let env = match &frame {
                Frame::Oversized(_) => None,
                f => Some(scan(f.bytes(chunk))),
            };
            Scanned { frame, env }
        })
        .collect()
}

/// Split `chunk` and scan every complete line.
pub fn feed(splitter: &mut LineSplitter, chunk: &[u8]) -> Vec<Scanned> {
    let mut frames = Vec::new();
    splitter.feed(chunk, &mut frames);
    scan_frames(frames, chunk)
}

/// End of stream: scan the unterminated tail, if any.
pub fn finish(splitter: &mut LineSplitter) -> Vec<Scanned> {
    let mut frames = Vec::new();
    splitter.finish(&mut frames);
    scan_frames(frames, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{JsonId, Kind};

    #[test]
    fn a_buffer_of_mixed_lines() {
        let mut s = LineSplitter::new(64);
        let first = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"met";
        let out = feed(&mut s, first);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].env.as_ref().unwrap().id, Some(JsonId::Int(1)));
        let second = b"hod\":\"m\"}\r\nnot json\n".to_vec();
        let mut second = second;
        second.extend(std::iter::repeat(b'x').take(100));
        second.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":\"t\",\"error\":{\"code\":1}}");
        let out = feed(&mut s, &second);
        let kinds: Vec<Option<Kind>> = out.iter().map(|x| x.env.as_ref().map(|e| e.kind)).collect();
        assert_eq!(kinds, vec![Some(Kind::Notification), Some(Kind::Invalid), None]);
        assert!(matches!(out[2].frame, Frame::Oversized(100)));
        let tail = finish(&mut s);
        assert_eq!(tail.len(), 1);
        let env = tail[0].env.as_ref().unwrap();
        assert_eq!((env.kind, env.id.clone()), (Kind::Error, Some(JsonId::Str("t".into()))));
    }
}
