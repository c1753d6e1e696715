//! The queue keyspace: checks that declared keys are one queue's layout and derives rows, meta, metrics.

/// One queue, known by its base root `emq:{q}:`; every key it derives shares the `{q}` hashtag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    base: Vec<u8>,
}

const PREFIX: &[u8] = b"emq:{";
const SUFFIX: &[u8] = b"}:";

impl Queue {
    /// The base root `emq:{q}:` with q non-empty and free of braces, so that the hashtag is
    /// exactly q and every derived key lands in q's slot.
    pub fn from_base(base: &[u8]) -> Option<Queue> {
        if base.len() < PREFIX.len() + SUFFIX.len() + 1 {
            return None;
        }
        let q = base.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
        if q.is_empty() || q.iter().any(|&b| b == b'{' || b == b'}') {
            return None;
        }
        Some(Queue {
            base: base.to_vec(),
        })
    }

    /// Declared keys in table order: `suffixes[i]` names key i, "" being the base itself. The
    /// base is found first, then every key must be exactly base + its suffix.
    pub fn from_keys(keys: &[&[u8]], suffixes: &[&str]) -> Option<Queue> {
        if keys.len() != suffixes.len() {
            return None;
        }
        // a key declared with suffix s is base + s: peel s to find the base candidate
        let base = keys
            .iter()
            .zip(suffixes)
            .find_map(|(k, s)| k.strip_suffix(s.as_bytes()))?;
        let q = Queue::from_base(base)?;
        let all_match = keys
            .iter()
            .zip(suffixes)
            .all(|(k, s)| *k == q.key(s.as_bytes()).as_slice());
        all_match.then_some(q)
    }

    /// PAUSE/RESUME declare only `emq:{q}:meta`; q comes from it.
    pub fn from_meta(meta: &[u8]) -> Option<Queue> {
        Queue::from_base(meta.strip_suffix(b"meta")?)
    }

    /// `emq:{q}:<suffix>`.
    pub fn key(&self, suffix: &[u8]) -> Vec<u8> {
        [self.base.as_slice(), suffix].concat()
    }

    /// The row `emq:{q}:job:<id>`; ids are arbitrary bytes.
    pub fn job(&self, id: &[u8]) -> Vec<u8> {
        [self.base.as_slice(), b"job:", id].concat()
    }

    pub fn meta(&self) -> Vec<u8> {
        self.key(b"meta")
    }

    /// `emq:{q}:metrics:failed` or `emq:{q}:metrics:completed`.
    pub fn metrics(&self, which: &[u8]) -> Vec<u8> {
        [self.base.as_slice(), b"metrics:", which].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAIM: [&str; 3] = ["pending", "active", ""];

    #[test]
    fn good_layouts() {
        let q = Queue::from_keys(
            &[b"emq:{q}:pending", b"emq:{q}:active", b"emq:{q}:"],
            &CLAIM,
        )
        .expect("layout");
        assert_eq!(q.job(b"j1"), b"emq:{q}:job:j1");
        assert_eq!(q.job(b"\0\xff"), b"emq:{q}:job:\0\xff");
        assert_eq!(q.meta(), b"emq:{q}:meta");
        assert_eq!(q.metrics(b"failed"), b"emq:{q}:metrics:failed");
        // arbitrary bytes in q, colons included
        let odd: &[u8] = b"emq:{a:b\0\xff}:";
        let keys = [
            [odd, b"pending"].concat(),
            [odd, b"active"].concat(),
            odd.to_vec(),
        ];
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        assert!(Queue::from_keys(&keys, &CLAIM).is_some());
        assert!(Queue::from_keys(&[b"emq:{x}:active", b"emq:{x}:"], &["active", ""]).is_some());
    }

    #[test]
    fn empty_queue_or_braces_are_refused() {
        assert_eq!(Queue::from_base(b"emq:{}:"), None);
        assert_eq!(Queue::from_base(b"emq:{a{b}:"), None);
        assert_eq!(Queue::from_base(b"emq:{a}b}:"), None);
        assert_eq!(Queue::from_base(b"emq:{{}:"), None);
        assert_eq!(Queue::from_base(b"emq:{:"), None);
        assert_eq!(Queue::from_base(b"emq:{q}"), None);
        assert_eq!(Queue::from_base(b"emq:q:"), None);
        assert_eq!(Queue::from_base(b"EMQ:{q}:"), None);
        assert_eq!(Queue::from_base(b""), None);
        assert_eq!(Queue::from_base(b"emq:{q}:x"), None);
        assert!(Queue::from_base(b"emq:{q}:").is_some());
    }

    #[test]
    fn wrong_suffixes_and_mixed_queues_are_refused() {
        let bad: [[&[u8]; 3]; 7] = [
            [b"emq:{q}:active", b"emq:{q}:pending", b"emq:{q}:"],
            [b"emq:{q}:pending", b"emq:{q}:active", b"emq:{r}:"],
            [b"emq:{q}:pending", b"emq:{r}:active", b"emq:{q}:"],
            [b"emq:{q}:pending", b"emq:{q}:active", b"emq:{q}:x"],
            [b"emq:{q}:pending", b"emq:{q}:active", b"emq:{q}"],
            [b"emq:{q}:pendingx", b"emq:{q}:active", b"emq:{q}:"],
            [b"emq:{}:pending", b"emq:{}:active", b"emq:{}:"],
        ];
        for keys in bad {
            assert_eq!(Queue::from_keys(&keys, &CLAIM), None, "{keys:?}");
        }
        assert_eq!(Queue::from_keys(&[b"emq:{q}:"], &CLAIM), None);
    }

    #[test]
    fn meta_layout() {
        assert_eq!(
            Queue::from_meta(b"emq:{q}:meta").map(|q| q.meta()),
            Some(b"emq:{q}:meta".to_vec())
        );
        for bad in [
            &b"emq:{q}meta"[..],
            b"emq:{}:meta",
            b"emq:{q}:",
            b"emq:{q}:metax",
            b"meta",
        ] {
            assert_eq!(Queue::from_meta(bad), None);
        }
    }
}
