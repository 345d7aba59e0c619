//! Counts a source keeps in total (malformed records, lost offsets) that
//! count each batch once: a read's count waits under the offset it read to
//! until that batch commits. A batch read again (run again, or read ahead
//! and then read by the batch itself) replaces its waiting count; a read
//! that never commits is never counted.

use crate::source::Offset;

/// Reads at most this many batches apart wait at once (a batch's own read
/// and the next batch's read ahead); older ones are dropped.
const WAITING: usize = 4;

/// Each read's count, waiting for its batch's commit.
#[derive(Debug, Default, Clone)]
pub(crate) struct ReadCounts {
    waiting: Vec<(Offset, u64)>,
}

impl ReadCounts {
    /// A read up to `end` counted `n`.
    pub(crate) fn read(&mut self, end: &Offset, n: u64) {
        self.waiting.retain(|(e, _)| e != end);
        self.waiting.push((end.clone(), n));
        if self.waiting.len() > WAITING {
            self.waiting.remove(0);
        }
    }

    /// The batch up to `end` committed: its read's count (0 if none waits).
    pub(crate) fn committed(&mut self, end: &Offset) -> u64 {
        match self.waiting.iter().position(|(e, _)| e == end) {
            Some(i) => self.waiting.remove(i).1,
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_read_twice_counts_once_and_only_when_it_commits() {
        let mut c = ReadCounts::default();
        let (a, b) = (Offset::from(1), Offset::from(2));
        c.read(&a, 3);
        // The next batch read ahead, then read again by the batch itself.
        c.read(&b, 5);
        c.read(&b, 5);
        assert_eq!(c.committed(&a), 3);
        assert_eq!(c.committed(&a), 0, "a batch commits once");
        assert_eq!(c.committed(&b), 5);
        // A read never committed is never counted; old ones are dropped.
        for i in 10..20 {
            c.read(&Offset::from(i), 1);
        }
        assert_eq!(c.waiting.len(), WAITING);
        assert_eq!(c.committed(&Offset::from(10)), 0);
        assert_eq!(c.committed(&Offset::from(19)), 1);
    }
}
