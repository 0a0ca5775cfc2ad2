//! The paged KV cache: fixed-size blocks, allocated as sequences grow, and
//! (optionally) full blocks of a shared prompt prefix kept for reuse.
//!
//! Prefix caching is modelled per shared prefix (the workload's
//! `--shared-prefix`): its full blocks are held once, used by every running
//! sequence that starts with it, and when nobody uses them they stay cached
//! but count as free, evicted least-recently-used when space is needed — as
//! vLLM's free queue does.

use std::collections::HashMap;

#[derive(Debug, Clone)]
struct Prefix {
    blocks: u32,
    users: u32,
    last_used: f64,
}

#[derive(Debug, Clone)]
pub struct KvCache {
    pub block_size: u32,
    pub total_blocks: u64,
    /// Blocks owned by sequences or by prefixes in use.
    used: u64,
    /// Blocks of cached prefixes nobody uses (free, but still hit-able).
    evictable: u64,
    prefixes: HashMap<u64, Prefix>,
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
            prefixes: HashMap::new(),
            prefix_caching,
            queries: 0,
            hits: 0,
        }
    }

    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.block_size as u64)
    }

    /// Share of blocks in use (cached but unused prefix blocks count as free).
    pub fn usage(&self) -> f64 {
        if self.total_blocks == 0 {
            return 0.0;
        }
        self.used as f64 / self.total_blocks as f64
    }

    pub fn capacity_tokens(&self) -> u64 {
        self.total_blocks * self.block_size as u64
    }

    /// Takes `n` more blocks, evicting unused cached prefixes if needed.
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

    fn evict_one(&mut self) {
        let victim = self
            .prefixes
            .iter()
            .filter(|(_, p)| p.users == 0)
            .min_by(|a, b| a.1.last_used.total_cmp(&b.1.last_used))
            .map(|(k, _)| *k);
        if let Some(k) = victim {
            let p = self.prefixes.remove(&k).expect("found above");
            self.evictable -= p.blocks as u64;
        }
    }

    /// Looks up a prompt's shared prefix. Returns the prefix blocks it can use
    /// (they are now in use by it); the last prompt token is never a hit.
    pub fn lookup(&mut self, key: u64, prefix_tokens: u32, prompt_tokens: u32, now: f64) -> u32 {
        if !self.prefix_caching || prefix_tokens == 0 {
            return 0;
        }
        self.queries += prompt_tokens as u64;
        let usable = prefix_tokens.min(prompt_tokens.saturating_sub(1)) / self.block_size;
        let Some(p) = self.prefixes.get_mut(&key) else {
            return 0;
        };
        if p.blocks < usable || usable == 0 {
            return 0;
        }
        if p.users == 0 {
            self.evictable -= p.blocks as u64;
            self.used += p.blocks as u64;
        }
        p.users += 1;
        p.last_used = now;
        self.hits += (usable * self.block_size) as u64;
        usable
    }

    /// A sequence has computed its prefix's full blocks: they become the
    /// cached prefix (moved from the sequence's own blocks). Returns true if
    /// ownership moved; false if caching is off or the prefix is already cached.
    pub fn register(&mut self, key: u64, blocks: u32, now: f64) -> bool {
        if !self.prefix_caching || blocks == 0 || self.prefixes.contains_key(&key) {
            return false;
        }
        self.prefixes.insert(
            key,
            Prefix {
                blocks,
                users: 1,
                last_used: now,
            },
        );
        true
    }

    /// A sequence that used a cached prefix is done with it.
    pub fn unuse(&mut self, key: u64, now: f64) {
        if let Some(p) = self.prefixes.get_mut(&key) {
            p.users -= 1;
            p.last_used = now;
            if p.users == 0 {
                self.used -= p.blocks as u64;
                self.evictable += p.blocks as u64;
            }
        }
    }
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
    fn cached_prefix_is_reused_and_evicted_when_space_is_needed() {
        let mut kv = KvCache::new(10, 16, true);
        assert!(kv.allocate(4)); // a sequence's 64 prefix tokens
        assert!(kv.register(7, 4, 0.0)); // they become the cached prefix
        kv.unuse(7, 1.0);
        assert_eq!(kv.usage(), 0.0, "unused cached blocks count as free");
        assert_eq!(
            kv.lookup(7, 64, 100, 2.0),
            4,
            "a later prompt hits all 4 blocks"
        );
        assert_eq!(kv.usage(), 0.4);
        kv.unuse(7, 3.0);
        assert!(kv.allocate(10), "evicts the cached prefix to make room");
        assert_eq!(kv.lookup(7, 64, 100, 4.0), 0, "evicted");
    }

    #[test]
    fn last_prompt_token_is_always_computed() {
        let mut kv = KvCache::new(10, 16, true);
        assert!(kv.allocate(2));
        kv.register(1, 2, 0.0);
        // A prompt that is exactly the 32-token prefix can only reuse one block.
        assert_eq!(kv.lookup(1, 32, 32, 1.0), 1);
    }
}
