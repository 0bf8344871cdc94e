//! TODO(helper): tokenizer
