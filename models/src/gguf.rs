//! TODO(helper): gguf
