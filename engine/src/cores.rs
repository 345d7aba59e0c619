//! The cores this process may use: the default for the worker pool's
//! threads and a new checkpoint's state partitions.

/// The cores this process may use (1 when unknown).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cores_are_what_the_system_says_and_never_zero() {
        let known = std::thread::available_parallelism().map(|n| n.get());
        assert_eq!(available_cores(), known.unwrap_or(1));
        assert!(available_cores() >= 1);
    }
}
