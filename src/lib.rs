pub use weir_engine as engine;
