//! TODO(helper): chat_template
