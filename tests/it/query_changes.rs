//! Changing a running query: which changes keep a checkpoint usable (#17).
