//! The paged KV cache: fixed-size blocks, allocated as sequences grow, and
//! (optionally) the full blocks of prompts kept for reuse — vLLM's automatic
//! prefix caching.
//!
//! A prompt is known to the cache as a chain of [`Unit`]s: runs of whole
//! blocks, each named by a hash of everything up to its end (so equal keys
//! mean equal prefixes, as vLLM's block hashes chain the parent's hash). A
//! unit is one block for prompts read from text (`sim serve`), one
//! `--shared-prefix`, or one 512-token Mooncake block. A sequence reuses the
//! longest chain of cached units its prompt starts with (never its last
//! token, which must be computed to give logits); the units it computes
//! become cached once full. Units nobody uses stay cached but count as free,
//! and are evicted least-recently-freed first when space is needed, the tail
//! of a prompt before its head — as vLLM's free-block queue does.

use std::collections::{BTreeMap, HashMap};

/// A run of whole blocks of a prompt, named by the hash of the prompt up to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub key: u64,
    /// A multiple of the block size.
    pub tokens: u32,
}

/// splitmix64: chains unit keys (`chain(parent, content)`).
pub fn chain(parent: u64, content: u64) -> u64 {
    let mut z = (parent ^ content.rotate_left(17)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[derive(Debug, Clone)]
struct Cached {
    blocks: u32,
    users: u32,
    /// When nobody uses it: its place in the eviction order.
    free_tick: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct KvCache {
    pub block_size: u32,
    pub total_blocks: u64,
    /// Blocks owned by sequences or by cached units in use.
    used: u64,
    /// Blocks of cached units nobody uses (free, but still hit-able).
    evictable: u64,
    units: HashMap<u64, Cached>,
    /// Unused cached units by the order they were freed: evicted first to last.
    free_order: BTreeMap<u64, u64>,
    tick: u64,
    pub prefix_caching: bool,
    /// Prompt tokens looked up / found in the prefix cache.
    pub queries: u64,
    pub hits: u64,
}

impl KvCache {
    pub fn new(total_blocks: u64, block_size: u32, prefix_caching: bool) -> Self {
        KvCache {
            block_size,
            total_blocks,
            used: 0,
            evictable: 0,
            units: HashMap::new(),
            free_order: BTreeMap::new(),
            tick: 0,
            prefix_caching,
            queries: 0,
            hits: 0,
        }
    }

    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.block_size as u64)
    }

    /// Share of blocks in use (cached but unused blocks count as free).
    pub fn usage(&self) -> f64 {
        if self.total_blocks == 0 {
            return 0.0;
        }
        self.used as f64 / self.total_blocks as f64
    }

    pub fn capacity_tokens(&self) -> u64 {
        self.total_blocks * self.block_size as u64
    }

    /// Takes `n` more blocks, evicting unused cached units if needed.
    pub fn allocate(&mut self, n: u64) -> bool {
        while self.total_blocks - self.used - self.evictable < n && self.evictable > 0 {
            self.evict_one();
        }
        if self.total_blocks - self.used - self.evictable < n {
            return false;
        }
        self.used += n;
        true
    }

    pub fn release(&mut self, n: u64) {
        self.used -= n;
    }

    /// Empties the prefix cache of every unit nobody uses (vLLM's
    /// `/reset_prefix_cache`; units held by running sequences stay until
    /// they end). The blocks freed.
    pub fn reset_prefix_cache(&mut self) -> u64 {
        let before = self.evictable;
        while !self.free_order.is_empty() {
            self.evict_one();
        }
        before - self.evictable
    }

    fn evict_one(&mut self) {
        if let Some((_, key)) = self.free_order.pop_first() {
            let u = self.units.remove(&key).expect("free units are cached");
            self.evictable -= u.blocks as u64;
        }
    }

    /// Looks up a prompt of `prompt_tokens` made of `units`: the longest chain
    /// of cached units it starts with, short of its last token. Those units
    /// are now in use by it. Returns how many units (from the first) it holds.
    pub fn lookup(&mut self, units: &[Unit], prompt_tokens: u32) -> usize {
        if !self.prefix_caching {
            return 0;
        }
        self.queries += prompt_tokens as u64;
        let limit = prompt_tokens.saturating_sub(1);
        let (mut held, mut end) = (0, 0u32);
        for u in units {
            end += u.tokens;
            if end > limit || !self.units.contains_key(&u.key) {
                break;
            }
            self.take(u.key);
            self.hits += u.tokens as u64;
            held += 1;
        }
        held
    }

    /// Tokens of the longest cached start of a prompt of `prompt_tokens`
    /// made of `units` (what [`KvCache::lookup`] would find), without using them.
    pub fn cached_prefix(&self, units: &[Unit], prompt_tokens: u32) -> u32 {
        if !self.prefix_caching {
            return 0;
        }
        let limit = prompt_tokens.saturating_sub(1);
        let mut end = 0u32;
        for u in units {
            if end + u.tokens > limit || !self.units.contains_key(&u.key) {
                break;
            }
            end += u.tokens;
        }
        end
    }

    /// One more user of a cached unit.
    fn take(&mut self, key: u64) {
        let c = self.units.get_mut(&key).expect("checked by the caller");
        if let Some(tick) = c.free_tick.take() {
            self.free_order.remove(&tick);
            self.evictable -= c.blocks as u64;
            self.used += c.blocks as u64;
        }
        c.users += 1;
    }

    /// A sequence has computed `unit`: its blocks become the cached unit
    /// (moved from the sequence's own). Returns false — the sequence keeps
    /// its blocks — when caching is off or the unit is already cached (a
    /// twin computed it at the same time).
    pub fn register(&mut self, unit: Unit) -> bool {
        let blocks = unit.tokens / self.block_size;
        if !self.prefix_caching || blocks == 0 || self.units.contains_key(&unit.key) {
            return false;
        }
        let c = Cached {
            blocks,
            users: 1,
            free_tick: None,
        };
        self.units.insert(unit.key, c);
        true
    }

    /// A sequence is done with the cached units it held (`held`, first to
    /// last): the tail is queued for eviction before the head.
    pub fn unuse(&mut self, held: &[Unit]) {
        for u in held.iter().rev() {
            let Some(c) = self.units.get_mut(&u.key) else {
                continue;
            };
            c.users -= 1;
            if c.users == 0 {
                self.tick += 1;
                c.free_tick = Some(self.tick);
                self.free_order.insert(self.tick, u.key);
                self.used -= c.blocks as u64;
                self.evictable += c.blocks as u64;
            }
        }
    }
}

/// The units of a prompt whose first `shared` tokens are a shared prefix
/// named `key`: one unit of its whole blocks (none when caching cannot use it).
pub fn shared_prefix_units(key: u64, shared: u64, block_size: u32) -> Vec<Unit> {
    let tokens = (shared.min(u32::MAX as u64) as u32 / block_size) * block_size;
    if tokens == 0 {
        return Vec::new();
    }
    vec![Unit { key, tokens }]
}

/// The units of a prompt of words (`sim serve` counts a word as a token):
/// one per whole block, each key chaining the block's words onto the last.
pub fn word_units<'a>(words: impl Iterator<Item = &'a str>, block_size: u32) -> Vec<Unit> {
    use std::hash::{Hash, Hasher};
    let mut units = Vec::new();
    let (mut key, mut n) = (0u64, 0u32);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for w in words {
        w.hash(&mut h);
        n += 1;
        if n == block_size {
            key = chain(key, h.finish());
            units.push(Unit {
                key,
                tokens: block_size,
            });
            h = std::collections::hash_map::DefaultHasher::new();
            n = 0;
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_fails_when_full_and_release_frees() {
        let mut kv = KvCache::new(10, 16, false);
        assert!(kv.allocate(7));
        assert!(!kv.allocate(4));
        assert!(kv.allocate(3));
        assert_eq!(kv.usage(), 1.0);
        kv.release(5);
        assert_eq!(kv.usage(), 0.5);
    }

    #[test]
    fn cached_units_are_reused_and_evicted_when_space_is_needed() {
        let mut kv = KvCache::new(10, 16, true);
        let units = shared_prefix_units(7, 64, 16);
        assert!(kv.allocate(4)); // a sequence's 64 prefix tokens
        assert!(kv.register(units[0])); // they become the cached unit
        kv.unuse(&units);
        assert_eq!(kv.usage(), 0.0, "unused cached blocks count as free");
        assert_eq!(kv.lookup(&units, 100), 1, "a later prompt hits the unit");
        assert_eq!((kv.queries, kv.hits), (100, 64));
        assert_eq!(kv.usage(), 0.4);
        kv.unuse(&units);
        assert!(kv.allocate(10), "evicts the cached unit to make room");
        assert_eq!(kv.lookup(&units, 100), 0, "evicted");
    }

    #[test]
    fn a_reset_drops_the_unused_cached_units_and_keeps_those_in_use() {
        let mut kv = KvCache::new(10, 16, true);
        let units = shared_prefix_units(7, 64, 16);
        assert!(kv.allocate(4));
        assert!(kv.register(units[0]));
        kv.unuse(&units);
        assert_eq!(kv.reset_prefix_cache(), 4);
        assert_eq!(kv.lookup(&units, 100), 0, "reset: a miss");
        // A unit a running sequence holds survives the reset.
        assert!(kv.allocate(4));
        assert!(kv.register(units[0]));
        assert_eq!(kv.reset_prefix_cache(), 0);
        kv.unuse(&units);
        assert_eq!(kv.lookup(&units, 100), 1, "held through the reset");
    }

    #[test]
    fn last_prompt_token_is_always_computed() {
        let mut kv = KvCache::new(10, 4, true);
        let units = word_units("a b c d e f g h".split(' '), 4);
        assert_eq!(units.len(), 2);
        assert!(kv.allocate(2));
        assert!(kv.register(units[0]) && kv.register(units[1]));
        // A prompt that is exactly the two blocks can only reuse the first.
        assert_eq!(kv.lookup(&units, 8), 1);
        assert_eq!(kv.lookup(&units, 9), 2);
    }

    #[test]
    fn a_chain_matches_only_its_own_prefix() {
        let a = word_units("x y z w p q r s".split(' '), 4);
        let b = word_units("x y z w p q r t".split(' '), 4);
        let c = word_units("u y z w p q r s".split(' '), 4);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1], "the second block differs");
        assert_ne!(
            a[1], c[1],
            "same block after a different head is another key"
        );
    }

    #[test]
    fn the_tail_of_a_freed_prompt_is_evicted_before_its_head() {
        let mut kv = KvCache::new(4, 4, true);
        let units = word_units("a b c d e f g h i j k l".split(' '), 4);
        assert!(kv.allocate(3));
        for u in &units {
            assert!(kv.register(*u));
        }
        kv.unuse(&units);
        assert!(kv.allocate(2), "one free block and one evicted");
        assert_eq!(kv.lookup(&units, 13), 2, "the head two survive");
    }
}
