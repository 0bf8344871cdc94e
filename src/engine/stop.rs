//! TODO(helper): stop
