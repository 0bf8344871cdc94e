//! The per-conversation table between original values and placeholders.
//!
//! It lives in memory only. Its `Debug` output shows counts, never values, so it is safe
//! to put in a `tracing` field or a panic message. Values are keyed by their exact text:
//! two spellings of one phone number get two placeholders, which keeps restoring exact.

use std::collections::HashMap;

use crate::entity::EntityKind;
use crate::placeholder::format_placeholder;

/// Value ↔ placeholder table of one conversation.
#[derive(Clone, Default)]
pub struct PlaceholderMap {
    /// `values[kind.index()][n - 1]` is the value behind `[KIND_n]`.
    values: Vec<Vec<String>>,
    /// `(kind, value)` → number.
    numbers: HashMap<(EntityKind, String), u32>,
}

impl PlaceholderMap {
    /// An empty table.
    pub fn new() -> Self {
        PlaceholderMap {
            values: vec![Vec::new(); EntityKind::ALL.len()],
            numbers: HashMap::new(),
        }
    }

    /// The placeholder number for `value` of `kind`, assigning the next free one if new.
    pub fn number_for(&mut self, kind: EntityKind, value: &str) -> u32 {
        if let Some(&n) = self.numbers.get(&(kind, value.to_owned())) {
            return n;
        }
        if self.values.len() < EntityKind::ALL.len() {
            self.values.resize(EntityKind::ALL.len(), Vec::new());
        }
        let list = &mut self.values[kind.index()];
        list.push(value.to_owned());
        let n = u32::try_from(list.len()).unwrap_or(u32::MAX);
        self.numbers.insert((kind, value.to_owned()), n);
        n
    }

    /// The canonical placeholder text for `value` of `kind`, assigning one if new.
    pub fn placeholder_for(&mut self, kind: EntityKind, value: &str) -> String {
        let n = self.number_for(kind, value);
        format_placeholder(kind, n)
    }

    /// The original value behind placeholder `kind` number `number`, if assigned.
    pub fn value(&self, kind: EntityKind, number: u32) -> Option<&str> {
        let idx = usize::try_from(number).ok()?.checked_sub(1)?;
        self.values.get(kind.index())?.get(idx).map(String::as_str)
    }

    /// How many values are mapped, over all kinds.
    pub fn len(&self) -> usize {
        self.numbers.len()
    }

    /// Whether no value is mapped.
    pub fn is_empty(&self) -> bool {
        self.numbers.is_empty()
    }

    /// Every `(kind, number, value)` entry, in kind then number order.
    ///
    /// This exposes the clear values: meant for a user-facing entity table, never for logs.
    pub fn entries(&self) -> impl Iterator<Item = (EntityKind, u32, &str)> + '_ {
        EntityKind::ALL.into_iter().flat_map(move |kind| {
            self.values
                .get(kind.index())
                .into_iter()
                .flatten()
                .enumerate()
                .map(move |(i, v)| (kind, (i + 1) as u32, v.as_str()))
        })
    }
}

impl std::fmt::Debug for PlaceholderMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("PlaceholderMap");
        s.field("entries", &self.numbers.len());
        s.field("values", &"<redacted>");
        s.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_value_same_number() {
        let mut m = PlaceholderMap::new();
        assert_eq!(m.placeholder_for(EntityKind::Person, "Ada"), "[PERSON_1]");
        assert_eq!(m.placeholder_for(EntityKind::Person, "Bob"), "[PERSON_2]");
        assert_eq!(m.placeholder_for(EntityKind::Email, "a@b.io"), "[EMAIL_1]");
        assert_eq!(m.placeholder_for(EntityKind::Person, "Ada"), "[PERSON_1]");
        assert_eq!(m.value(EntityKind::Person, 2), Some("Bob"));
        assert_eq!(m.value(EntityKind::Person, 0), None);
        assert_eq!(m.value(EntityKind::Person, 3), None);
    }

    #[test]
    fn debug_is_redacted() {
        let mut m = PlaceholderMap::new();
        m.number_for(EntityKind::Secret, "hunter2-very-secret");
        let d = format!("{m:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("entries: 1"));
    }
}
