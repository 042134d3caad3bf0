//! Pending request ids -> opaque tokens, for one transport lifetime.
//!
//! Integer ids: `allocate` hands out `hi, hi+1, ...` up to an exclusive `limit`, so the
//! owner can give each transport lifetime its own block of ids; caller-chosen integer ids
//! widen the used interval `[lo, hi)`. Every integer inside that interval counts as used, so it can
//! never be registered again and a reply to it that is not pending is *stale*. (A gap
//! inside the interval that was never actually sent is treated as used too: the
//! conservative choice, it can only refuse a registration, never allow a reuse.)
//!
//! String ids: a bounded FIFO record of the last [`SEEN_STRING_IDS`] string ids ever used,
//! so late replies to them are told apart from replies to ids we never sent.
//!
//! [`CallCorrelator`] layers the worker's forwarded calls on top: a pending id's token is
//! either a caller object or the parent's call id, kept natively so a reply to a forwarded
//! call can be routed back without touching Python.

use std::cmp::Reverse;
use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};

use crate::scan::JsonId;
use crate::stamp::CodecError;

/// How many string ids are remembered for stale detection after they stop being pending.
pub const SEEN_STRING_IDS: usize = 65536;

/// Hashing for the integer keys of the id maps (two lookups or inserts per request on
/// each side of the channel): one folded multiply of the key with a per-process random
/// key, where the standard SipHash is a few dozen operations. Keyed, so the placement of
/// ids in a map cannot be chosen from outside; the ids inserted are ours anyway (a
/// server only looks ids up).
#[derive(Clone, Debug)]
pub struct IdHashing(u64);

impl Default for IdHashing {
    fn default() -> Self {
        IdHashing(RandomState::new().hash_one(0x2545_f491_4f6c_dd1d_u64))
    }
}

impl BuildHasher for IdHashing {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher { key: self.0, hash: 0 }
    }
}

#[derive(Debug)]
pub struct IdHasher {
    key: u64,
    hash: u64,
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by the integer keys (they call `write_u64`/`write_i64`); any other key
        // is folded in eight bytes at a time.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        let product = u128::from(n ^ self.key ^ self.hash) * u128::from(0x9e37_79b9_7f4a_7c15_u64);
        self.hash = (product as u64) ^ ((product >> 64) as u64);
    }

    #[inline]
    fn write_i64(&mut self, n: i64) {
        self.write_u64(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Correlation {
    None = 0,
    Matched = 1,
    Unknown = 2,
    Stale = 3,
}

#[derive(Debug)]
pub struct Correlator<T> {
    /// Lowest integer id used so far (== `hi` while none is).
    lo: i64,
    /// One past the highest integer id used so far; the next id `allocate` returns.
    hi: i64,
    /// `allocate` never returns this id or any above it.
    limit: i64,
    ints: HashMap<i64, T, IdHashing>,
    strs: HashMap<String, T>,
    seen_strs: HashSet<String>,
    seen_order: VecDeque<String>,
    seen_cap: usize,
}

impl<T> Correlator<T> {
    pub fn new(first_id: i64) -> Self {
        Self::with_seen_capacity(first_id, SEEN_STRING_IDS)
    }

    pub fn with_seen_capacity(first_id: i64, seen_cap: usize) -> Self {
        Correlator {
            lo: first_id,
            hi: first_id,
            limit: i64::MAX,
            ints: HashMap::default(),
            strs: HashMap::new(),
            seen_strs: HashSet::new(),
            seen_order: VecDeque::new(),
            seen_cap: seen_cap.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.ints.len() + self.strs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, id: &JsonId) -> bool {
        match id {
            JsonId::Int(n) => self.ints.contains_key(n),
            JsonId::Str(s) => self.strs.contains_key(s),
        }
    }

    fn contains_int(&self, n: i64) -> bool {
        self.ints.contains_key(&n)
    }

    /// The id the next `allocate` will return (if ids are not exhausted).
    pub fn next_id(&self) -> i64 {
        self.hi
    }

    /// Let `allocate` hand out ids below `limit` only.
    pub fn set_limit(&mut self, limit: i64) {
        self.limit = limit;
    }

    /// How many more ids `allocate` can hand out.
    pub fn ids_left(&self) -> i64 {
        (self.limit - self.hi).max(0)
    }

    fn int_used(&self, n: i64) -> bool {
        self.lo <= n && n < self.hi
    }

    /// Register `token` under the next unused integer id.
    pub fn allocate(&mut self, token: T) -> Result<i64, CodecError> {
        let id = self.hi;
        if id >= self.limit || id == i64::MAX {
            return Err(CodecError(format!("request ids are used up (the limit is {})", self.limit)));
        }
        self.hi += 1;
        self.ints.insert(id, token);
        Ok(id)
    }

    /// Register a caller-chosen id; refused if it is pending or was used before.
    pub fn register(&mut self, id: JsonId, token: T) -> Result<(), CodecError> {
        match id {
            JsonId::Int(n) => {
                if self.int_used(n) {
                    return Err(CodecError(format!("request id {n} is pending or was used before")));
                }
                if n == i64::MAX {
                    // `hi` could not move past it; refuse rather than break monotonicity.
                    return Err(CodecError(format!("request id {n} is out of range")));
                }
                // Widen the used interval; `allocate` continues above it.
                self.lo = self.lo.min(n);
                self.hi = self.hi.max(n + 1);
                self.ints.insert(n, token);
            }
            JsonId::Str(s) => {
                if self.strs.contains_key(&s) || self.seen_strs.contains(&s) {
                    return Err(CodecError(format!("request id {s:?} is pending or was used before")));
                }
                self.remember(s.clone());
                self.strs.insert(s, token);
            }
        }
        Ok(())
    }

    fn remember(&mut self, s: String) {
        if self.seen_order.len() >= self.seen_cap {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen_strs.remove(&old);
            }
        }
        self.seen_strs.insert(s.clone());
        self.seen_order.push_back(s);
    }

    /// A response arrived for `id`: the token once, then stale.
    pub fn resolve(&mut self, id: Option<&JsonId>) -> (Correlation, Option<T>) {
        match id {
            None => (Correlation::Unknown, None),
            Some(JsonId::Int(n)) => match self.ints.remove(n) {
                Some(t) => (Correlation::Matched, Some(t)),
                None if self.int_used(*n) => (Correlation::Stale, None),
                None => (Correlation::Unknown, None),
            },
            Some(JsonId::Str(s)) => match self.strs.remove(s) {
                Some(t) => (Correlation::Matched, Some(t)),
                None if self.seen_strs.contains(s) => (Correlation::Stale, None),
                None => (Correlation::Unknown, None),
            },
        }
    }

    /// Forget a pending id without a response; a later reply is stale.
    pub fn discard(&mut self, id: &JsonId) -> Option<T> {
        match id {
            JsonId::Int(n) => self.ints.remove(n),
            JsonId::Str(s) => self.strs.remove(s),
        }
    }

    /// Every pending (id, token), integers ascending then strings sorted; all become stale.
    pub fn drain(&mut self) -> Vec<(JsonId, T)> {
        let mut ints: Vec<(i64, T)> = self.ints.drain().collect();
        ints.sort_unstable_by_key(|(k, _)| *k);
        let mut strs: Vec<(String, T)> = self.strs.drain().collect();
        strs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        ints.into_iter()
            .map(|(k, t)| (JsonId::Int(k), t))
            .chain(strs.into_iter().map(|(k, t)| (JsonId::Str(k), t)))
            .collect()
    }
}

/// What a [`CallCorrelator`] entry stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token<T> {
    /// A caller's object (a future, a probe marker, ...).
    Object(T),
    /// A call forwarded on behalf of the parent, known there by this call id.
    Call(u64),
}

/// A [`Correlator`] whose entries may be forwarded calls, plus the reverse map
/// call id -> JSON-RPC id that cancelling one needs. The map holds exactly the pending
/// `Token::Call` entries: every path that removes an entry (resolve, discard, drain,
/// expire) removes its map entry too.
///
/// Integer entries may carry a deadline (microseconds on the caller's clock). Deadlines
/// are kept ordered so the owner needs one timer for the earliest, not one per request:
/// in the parent, a timer per call costs more than the rest of the call path.
/// They sit in a min-heap that an entry's answer does not touch (ids are never reused, so
/// a deadline whose id is no longer pending is simply skipped when it comes up); the heap
/// is pruned when it holds more than twice the pending entries, so answered calls cost
/// no memory for long. (An ordered set plus an id -> deadline map would cost two removals
/// per answer, about half of the correlator's time.)
#[derive(Debug)]
pub struct CallCorrelator<T> {
    ids: Correlator<Token<T>>,
    calls: HashMap<u64, i64, IdHashing>,
    /// (deadline, id) of integer entries given a deadline, earliest on top; some may be
    /// answered already (skipped when they come up).
    deadlines: BinaryHeap<Reverse<(u64, i64)>>,
}

impl<T> CallCorrelator<T> {
    pub fn new(first_id: i64) -> Self {
        CallCorrelator { ids: Correlator::new(first_id), calls: HashMap::default(), deadlines: BinaryHeap::new() }
    }

    fn set_deadline(&mut self, id: i64, deadline: Option<u64>) {
        if let Some(d) = deadline {
            if self.deadlines.len() >= 2 * self.ids.len() + 1024 {
                let ids = &self.ids;
                self.deadlines.retain(|Reverse((_, id))| ids.contains_int(*id));
            }
            self.deadlines.push(Reverse((d, id)));
        }
    }

    /// The earliest pending deadline, if any entry has one.
    pub fn next_deadline(&mut self) -> Option<u64> {
        while let Some(&Reverse((d, id))) = self.deadlines.peek() {
            if self.ids.contains_int(id) {
                return Some(d);
            }
            self.deadlines.pop();
        }
        None
    }

    /// Remove and return every entry whose deadline is at or before `now`, earliest
    /// first. Like `discard`, a later reply to one of them is stale.
    pub fn expire(&mut self, now: u64) -> Vec<(JsonId, Token<T>)> {
        let mut out = Vec::new();
        while let Some(&Reverse((d, id))) = self.deadlines.peek() {
            if d > now {
                break;
            }
            self.deadlines.pop();
            let key = JsonId::Int(id);
            if let Some(token) = self.ids.discard(&key) {
                if let Token::Call(c) = &token {
                    self.calls.remove(c);
                }
                out.push((key, token));
            }
        }
        out
    }

    /// Pending entries with a deadline.
    pub fn deadlines_pending(&self) -> usize {
        self.deadlines.iter().filter(|Reverse((_, id))| self.ids.contains_int(*id)).count()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn contains(&self, id: &JsonId) -> bool {
        self.ids.contains(id)
    }

    pub fn next_id(&self) -> i64 {
        self.ids.next_id()
    }

    pub fn set_limit(&mut self, limit: i64) {
        self.ids.set_limit(limit);
    }

    pub fn ids_left(&self) -> i64 {
        self.ids.ids_left()
    }

    /// Forwarded calls still pending.
    pub fn calls_pending(&self) -> usize {
        self.calls.len()
    }

    pub fn call_pending(&self, call_id: u64) -> bool {
        self.calls.contains_key(&call_id)
    }

    pub fn allocate(&mut self, token: T, deadline: Option<u64>) -> Result<i64, CodecError> {
        let id = self.ids.allocate(Token::Object(token))?;
        self.set_deadline(id, deadline);
        Ok(id)
    }

    pub fn register(&mut self, id: JsonId, token: T) -> Result<(), CodecError> {
        self.ids.register(id, Token::Object(token))
    }

    /// Allocate the next JSON-RPC id for the parent's call `call_id`. Refused while that
    /// call id is pending: the reverse map must stay one-to-one.
    pub fn allocate_call(&mut self, call_id: u64, deadline: Option<u64>) -> Result<i64, CodecError> {
        if self.calls.contains_key(&call_id) {
            return Err(CodecError(format!("call id {call_id} is already pending")));
        }
        let id = self.ids.allocate(Token::Call(call_id))?;
        self.calls.insert(call_id, id);
        self.set_deadline(id, deadline);
        Ok(id)
    }

    fn forget_call(&mut self, token: &Option<Token<T>>) {
        if let Some(Token::Call(c)) = token {
            self.calls.remove(c);
        }
    }

    pub fn resolve(&mut self, id: Option<&JsonId>) -> (Correlation, Option<Token<T>>) {
        let out = self.ids.resolve(id);
        self.forget_call(&out.1);
        out
    }

    pub fn discard(&mut self, id: &JsonId) -> Option<Token<T>> {
        let out = self.ids.discard(id);
        self.forget_call(&out);
        out
    }

    /// Forget a forwarded call (cancelled or timed out in the parent); its JSON-RPC id,
    /// if it was pending, so the server can be told. A later reply is stale.
    pub fn discard_call(&mut self, call_id: u64) -> Option<i64> {
        let id = self.calls.remove(&call_id)?;
        let gone = self.ids.discard(&JsonId::Int(id));
        debug_assert!(matches!(gone, Some(Token::Call(c)) if c == call_id));
        Some(id)
    }

    pub fn drain(&mut self) -> Vec<(JsonId, Token<T>)> {
        self.calls.clear();
        self.deadlines.clear();
        self.ids.drain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> JsonId {
        JsonId::Str(x.into())
    }

    #[test]
    fn a_block_of_ids_ends_at_its_limit() {
        let mut c = CallCorrelator::<()>::new(1 << 32);
        c.set_limit((1 << 32) + 2);
        assert_eq!(c.ids_left(), 2);
        assert_eq!(c.allocate_call(5, None).unwrap(), 1 << 32);
        assert_eq!(c.allocate((), None).unwrap(), (1 << 32) + 1);
        assert_eq!(c.ids_left(), 0);
        assert!(c.allocate_call(6, None).unwrap_err().0.contains("used up"));
        assert!(!c.call_pending(6), "a refused call leaves nothing behind");
    }

    #[test]
    fn allocate_resolve_once_then_stale() {
        let mut c = Correlator::new(1);
        assert_eq!(c.allocate("a").unwrap(), 1);
        assert_eq!(c.allocate("b").unwrap(), 2);
        assert_eq!(c.len(), 2);
        assert_eq!(c.resolve(Some(&JsonId::Int(2))), (Correlation::Matched, Some("b")));
        assert_eq!(c.resolve(Some(&JsonId::Int(2))), (Correlation::Stale, None));
        assert_eq!(c.resolve(Some(&JsonId::Int(3))), (Correlation::Unknown, None));
        assert_eq!(c.resolve(Some(&JsonId::Int(0))), (Correlation::Unknown, None));
        assert_eq!(c.resolve(Some(&s("1"))), (Correlation::Unknown, None), "\"1\" is not 1");
        assert_eq!(c.resolve(None), (Correlation::Unknown, None));
        assert!(c.contains(&JsonId::Int(1)));
        assert_eq!(c.allocate("c").unwrap(), 3, "never reuses an id");
    }

    #[test]
    fn register_refuses_reuse_and_moves_allocation_past_it() {
        let mut c = Correlator::new(1);
        c.register(JsonId::Int(10), "x").unwrap();
        assert!(c.register(JsonId::Int(10), "y").is_err());
        assert_eq!(c.allocate("z").unwrap(), 11);
        assert!(c.register(JsonId::Int(11), "w").is_err());
        assert_eq!(c.resolve(Some(&JsonId::Int(10))), (Correlation::Matched, Some("x")));
        assert!(c.register(JsonId::Int(10), "again").is_err(), "used before");
        c.register(JsonId::Int(-5), "neg").unwrap();
        assert_eq!(c.allocate("n").unwrap(), 12);
        assert!(c.register(JsonId::Int(i64::MAX), "max").is_err());

        c.register(s("10"), "str").unwrap();
        assert!(c.register(s("10"), "str2").is_err());
        assert_eq!(c.discard(&s("10")), Some("str"));
        assert_eq!(c.resolve(Some(&s("10"))), (Correlation::Stale, None));
        assert!(c.register(s("10"), "str3").is_err());
    }

    #[test]
    fn drain_hands_back_everything_and_later_replies_are_stale() {
        let mut c = Correlator::new(100);
        c.allocate(1).unwrap();
        c.register(s("b"), 2).unwrap();
        c.register(s("a"), 3).unwrap();
        c.allocate(4).unwrap();
        let d = c.drain();
        assert_eq!(d, vec![(JsonId::Int(100), 1), (JsonId::Int(101), 4), (s("a"), 3), (s("b"), 2)]);
        assert!(c.is_empty());
        for id in [JsonId::Int(100), JsonId::Int(101), s("a"), s("b")] {
            assert_eq!(c.resolve(Some(&id)), (Correlation::Stale, None));
        }
    }

    #[test]
    fn string_memory_is_bounded() {
        let mut c = Correlator::with_seen_capacity(1, 3);
        for i in 0..5 {
            c.register(s(&i.to_string()), i).unwrap();
            c.resolve(Some(&s(&i.to_string())));
        }
        assert_eq!(c.seen_strs.len(), 3);
        assert_eq!(c.resolve(Some(&s("4"))), (Correlation::Stale, None));
        assert_eq!(c.resolve(Some(&s("0"))), (Correlation::Unknown, None), "forgotten after eviction");
    }

    #[test]
    fn forwarded_calls_share_the_id_space() {
        let mut c = CallCorrelator::new(1);
        assert_eq!(c.allocate("probe", None).unwrap(), 1);
        assert_eq!(c.next_id(), 2);
        assert_eq!(c.allocate_call(900, None).unwrap(), 2);
        assert_eq!(c.allocate_call(901, None).unwrap(), 3);
        assert!(c.allocate_call(900, None).is_err(), "a pending call id is refused");
        assert_eq!(c.next_id(), 4, "a refused call consumes no id");
        assert_eq!((c.len(), c.calls_pending()), (3, 2));
        assert_eq!(c.resolve(Some(&JsonId::Int(2))), (Correlation::Matched, Some(Token::Call(900))));
        assert!(!c.call_pending(900));
        assert_eq!(c.resolve(Some(&JsonId::Int(2))), (Correlation::Stale, None));
        assert_eq!(c.resolve(Some(&JsonId::Int(1))), (Correlation::Matched, Some(Token::Object("probe"))));
        // Once resolved, the call id may be used again (the parent never does, but the map
        // must not remember it).
        assert_eq!(c.allocate_call(900, None).unwrap(), 4);
    }

    #[test]
    fn discard_call_makes_the_reply_stale() {
        let mut c: CallCorrelator<()> = CallCorrelator::new(10);
        let id = c.allocate_call(7, None).unwrap();
        assert_eq!(c.discard_call(7), Some(id));
        assert_eq!(c.discard_call(7), None);
        assert!(c.is_empty());
        assert_eq!(c.resolve(Some(&JsonId::Int(id))), (Correlation::Stale, None));
        // Discarding by JSON-RPC id keeps the map in sync too.
        let id = c.allocate_call(8, None).unwrap();
        assert_eq!(c.discard(&JsonId::Int(id)), Some(Token::Call(8)));
        assert_eq!(c.calls_pending(), 0);
        assert_eq!(c.discard_call(8), None);
    }

    #[test]
    fn drain_and_bulk_resolve_leave_no_map_entries() {
        let mut c = CallCorrelator::new(1);
        let ids: Vec<i64> = (0..1000u64).map(|k| c.allocate_call(k, None).unwrap()).collect();
        for id in &ids[..500] {
            assert_eq!(c.resolve(Some(&JsonId::Int(*id))).0, Correlation::Matched);
        }
        assert_eq!(c.calls_pending(), 500);
        c.allocate("obj", None).unwrap();
        let drained = c.drain();
        assert_eq!(drained.len(), 501);
        assert_eq!(drained[0], (JsonId::Int(ids[500]), Token::Call(500)));
        assert_eq!(drained[500].1, Token::Object("obj"));
        assert_eq!((c.len(), c.calls_pending()), (0, 0));
    }

    #[test]
    fn deadlines_expire_in_order_and_leave_with_their_entries() {
        let mut c = CallCorrelator::new(1);
        let a = c.allocate("a", Some(300)).unwrap();
        let b = c.allocate_call(77, Some(100)).unwrap();
        let d = c.allocate("d", Some(200)).unwrap();
        let no = c.allocate("no deadline", None).unwrap();
        assert_eq!(c.next_deadline(), Some(100));
        // Resolving an entry drops its deadline.
        assert_eq!(c.resolve(Some(&JsonId::Int(d))).0, Correlation::Matched);
        assert_eq!(c.deadlines_pending(), 2);
        assert!(c.expire(99).is_empty());
        assert_eq!(c.expire(250), vec![(JsonId::Int(b), Token::Call(77))]);
        assert_eq!(c.calls_pending(), 0, "an expired call leaves the reverse map");
        assert_eq!(c.resolve(Some(&JsonId::Int(b))), (Correlation::Stale, None));
        assert_eq!(c.next_deadline(), Some(300));
        assert_eq!(c.discard(&JsonId::Int(a)), Some(Token::Object("a")));
        assert_eq!(c.next_deadline(), None);
        assert!(c.expire(u64::MAX).is_empty(), "entries without a deadline never expire");
        assert!(c.contains(&JsonId::Int(no)));
        let e = c.allocate_call(5, Some(10)).unwrap();
        assert_eq!(c.discard_call(5), Some(e));
        assert_eq!(c.deadlines_pending(), 0);
        c.allocate("x", Some(1)).unwrap();
        c.drain();
        assert_eq!((c.deadlines_pending(), c.next_deadline()), (0, None));
    }

    #[test]
    fn answered_deadlines_are_pruned_and_pending_ones_survive_it() {
        let mut c = CallCorrelator::new(1);
        let waiting: Vec<i64> = (0..10).map(|i| c.allocate("waiting", Some(500 + i)).unwrap()).collect();
        for i in 0..20_000u64 {
            let id = c.allocate("answered", Some(1_000_000 + i)).unwrap();
            assert_eq!(c.resolve(Some(&JsonId::Int(id))).0, Correlation::Matched);
        }
        assert!(c.deadlines.len() <= 2 * 10 + 1024 + 1, "the heap holds {}", c.deadlines.len());
        assert_eq!((c.deadlines_pending(), c.next_deadline()), (10, Some(500)));
        let expired: Vec<JsonId> = c.expire(u64::MAX).into_iter().map(|(id, _)| id).collect();
        assert_eq!(expired, waiting.into_iter().map(JsonId::Int).collect::<Vec<_>>(), "earliest first");
        assert_eq!((c.deadlines_pending(), c.next_deadline(), c.len()), (0, None, 0));
    }

    #[test]
    fn id_hashing_is_keyed_and_spreads_sequential_ids() {
        use std::hash::BuildHasher;
        let (a, b) = (IdHashing::default(), IdHashing::default());
        assert_ne!(a.hash_one(1i64), b.hash_one(1i64), "each map has its own key");
        let mut top = std::collections::HashSet::new();
        for n in 0..4096i64 {
            top.insert(a.hash_one(n) >> 57); // the bits a map compares first
        }
        assert_eq!(top.len(), 128, "every top-7-bit value occurs");
    }
}
