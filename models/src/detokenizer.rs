//! TODO(helper): detokenizer
