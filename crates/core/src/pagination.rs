//! List windows per spec §4.5: `page` is 1-indexed and clamped to ≥ 1, `limit` is
//! clamped to [1, 100], and `offset`, when present, overrides `page`.

pub const MAX_LIMIT: i64 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: i64,
    pub offset: i64,
}

impl PageRequest {
    pub fn new(page: Option<i64>, limit: Option<i64>, offset: Option<i64>, default_limit: i64) -> Self {
        let limit = limit.unwrap_or(default_limit).clamp(1, MAX_LIMIT);
        let offset = match offset {
            Some(offset) => offset.max(0),
            None => (page.unwrap_or(1).max(1) - 1).saturating_mul(limit),
        };
        PageRequest { limit, offset }
    }

    /// The 1-indexed page containing the first item of the window.
    pub fn page(&self) -> i64 {
        self.offset / self.limit + 1
    }
}

#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: i64,
    /// False when `total` is a lower bound (very large result sets are not counted to the end).
    pub total_exact: bool,
    pub request: PageRequest,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            total: self.total,
            total_exact: self.total_exact,
            request: self.request,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_and_offsets() {
        assert_eq!(PageRequest::new(Some(0), None, None, 50), PageRequest { limit: 50, offset: 0 });
        assert_eq!(PageRequest::new(None, Some(500), None, 50).limit, 100);
        assert_eq!(PageRequest::new(None, Some(0), None, 50).limit, 1);
        assert_eq!(PageRequest::new(Some(3), Some(25), None, 50), PageRequest::new(None, Some(25), Some(50), 50));
        assert_eq!(PageRequest::new(Some(9), Some(25), Some(50), 50).offset, 50);
        assert_eq!(PageRequest::new(None, Some(25), Some(50), 50).page(), 3);
    }
}
