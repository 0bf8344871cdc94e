//! TODO(helper): sampling
