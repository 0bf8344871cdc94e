//! Bookkeeping of the batch's KV rows, kept apart from MLX so the rules can
//! be tested without a model: which row a sequence gets, how many rows and
//! positions the buffers hold, and whether a new sequence fits the budget.

use hearth_models::BatchShape;

/// Positions are allocated in multiples of this.
pub const CAPACITY_STEP: usize = 256;

/// Row allocation: a sequence takes the lowest free row and keeps it for
/// life; rows are never moved.
#[derive(Debug, Default)]
pub struct Rows {
    used: Vec<bool>,
}

impl Rows {
    pub fn acquire(&mut self) -> usize {
        match self.used.iter().position(|u| !u) {
            Some(i) => {
                self.used[i] = true;
                i
            }
            None => {
                self.used.push(true);
                self.used.len() - 1
            }
        }
    }

    pub fn release(&mut self, row: usize) {
        if let Some(u) = self.used.get_mut(row) {
            *u = false;
        }
        while self.used.last() == Some(&false) {
            self.used.pop();
        }
    }

    /// Rows `0..span()` cover every used row (a decode step runs over them).
    pub fn span(&self) -> usize {
        self.used.len()
    }

    /// The row the next `acquire` would return.
    pub fn next_free(&self) -> usize {
        self.used.iter().position(|u| !u).unwrap_or(self.used.len())
    }
}

/// The buffer shape needed to give `row` room for `positions` tokens, grown
/// geometrically from `current` (rows to a power of two up to `max_rows`,
/// positions by at least a quarter) so growth copies stay O(n) overall.
pub fn grown_shape(
    current: BatchShape,
    row: usize,
    positions: usize,
    max_rows: usize,
) -> BatchShape {
    let rows = if row < current.rows {
        current.rows
    } else {
        (row + 1).next_power_of_two().min(max_rows.max(row + 1))
    };
    let capacity = if positions <= current.capacity {
        current.capacity
    } else {
        let geometric = current.capacity + current.capacity / 4;
        positions.max(geometric).div_ceil(CAPACITY_STEP) * CAPACITY_STEP
    };
    BatchShape { rows, capacity }
}

/// Bytes of KV buffers of `shape` at `bytes_per_token` (all layers, K and V).
pub fn shape_bytes(shape: BatchShape, bytes_per_token: usize) -> usize {
    shape.rows * shape.capacity * bytes_per_token
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_take_the_lowest_free_slot_and_span_shrinks() {
        let mut rows = Rows::default();
        assert_eq!((rows.acquire(), rows.acquire(), rows.acquire()), (0, 1, 2));
        rows.release(1);
        assert_eq!(rows.span(), 3);
        assert_eq!(rows.next_free(), 1);
        assert_eq!(rows.acquire(), 1);
        rows.release(2);
        rows.release(1);
        assert_eq!(rows.span(), 1);
        rows.release(0);
        assert_eq!(rows.span(), 0);
    }

    #[test]
    fn shapes_grow_geometrically_and_never_shrink() {
        let s = grown_shape(BatchShape::default(), 0, 100, 8);
        assert_eq!(
            s,
            BatchShape {
                rows: 1,
                capacity: 256
            }
        );
        let s = grown_shape(s, 2, 100, 8);
        assert_eq!(s.rows, 4);
        let s2 = grown_shape(s, 5, 300, 8);
        assert_eq!(s2.rows, 8);
        assert_eq!(s2.capacity, 512);
        // Small growth still grows by at least a quarter.
        let s3 = grown_shape(
            BatchShape {
                rows: 1,
                capacity: 4096,
            },
            0,
            4097,
            8,
        );
        assert_eq!(s3.capacity, 5120);
        // Fits already: unchanged.
        assert_eq!(grown_shape(s3, 0, 10, 8), s3);
        // max_rows caps the power of two.
        assert_eq!(grown_shape(BatchShape::default(), 5, 1, 6).rows, 6);
        assert_eq!(shape_bytes(s2, 10), 8 * 512 * 10);
    }
}
