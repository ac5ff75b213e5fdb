//! List windows per spec §4.5: `page` is 1-indexed and clamped to ≥ 1, `limit` is
//! clamped to [1, 100], and `offset`, when present, overrides `page` (a negative offset is a
//! 400: unlike a page number, it has no sensible nearest value).

use crate::error::{Error, Result};

pub const MAX_LIMIT: i64 = 100;

/// The deepest window a list serves. Nobody pages a billion items deep; beyond this the
/// arithmetic of pages and totals would overflow, so such a request is refused with 400.
pub const MAX_OFFSET: i64 = 1_000_000_000;
/// The highest page number, whatever the limit (with limit 100 it reaches [`MAX_OFFSET`]).
pub const MAX_PAGE: i64 = 10_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: i64,
    pub offset: i64,
}

impl PageRequest {
    pub fn new(page: Option<i64>, limit: Option<i64>, offset: Option<i64>, default_limit: i64) -> Result<Self> {
        let limit = limit.unwrap_or(default_limit).clamp(1, MAX_LIMIT);
        let field = if offset.is_some() { "offset" } else { "page" };
        if page.is_some_and(|page| page > MAX_PAGE) {
            return Err(Error::invalid_field("page", format!("must be at most {MAX_PAGE}")));
        }
        if offset.is_some_and(|offset| offset < 0) {
            return Err(Error::invalid_field("offset", "must be zero or more"));
        }
        let offset = match offset {
            Some(offset) => offset,
            None => (page.unwrap_or(1).max(1) - 1).saturating_mul(limit),
        };
        if offset > MAX_OFFSET {
            return Err(Error::invalid_field(field, format!("the window may start at most {MAX_OFFSET} items deep")));
        }
        Ok(PageRequest { limit, offset })
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

    fn window(page: Option<i64>, limit: Option<i64>, offset: Option<i64>) -> PageRequest {
        PageRequest::new(page, limit, offset, 50).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn clamps_and_offsets() {
        assert_eq!(window(Some(0), None, None), PageRequest { limit: 50, offset: 0 });
        assert_eq!(window(None, Some(500), None).limit, 100);
        assert_eq!(window(None, Some(0), None).limit, 1);
        assert_eq!(window(Some(3), Some(25), None), window(None, Some(25), Some(50)));
        assert_eq!(window(Some(9), Some(25), Some(50)).offset, 50);
        assert_eq!(window(None, Some(25), Some(50)).page(), 3);
    }

    #[test]
    fn windows_too_deep_are_refused_not_overflowed() {
        assert!(PageRequest::new(None, Some(1), Some(i64::MAX), 50).is_err());
        assert!(PageRequest::new(Some(i64::MAX), Some(100), None, 50).is_err());
        assert!(PageRequest::new(None, Some(100), Some(MAX_OFFSET), 50).is_ok());
        assert!(PageRequest::new(None, Some(10), Some(-1), 50).is_err());
    }
}
