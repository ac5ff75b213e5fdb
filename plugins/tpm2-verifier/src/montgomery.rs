//! The RSA public operation `s^e mod n` on fixed-width limbs with Montgomery multiplication,
//! for signature verification with 2048- to 4096-bit moduli and any public exponent.
//!
//! Why not `num-bigint-dig` (what the `rsa` crate uses): every product there allocates and every
//! reduction is a long division over u32 digits; the four RSA checks of one `verify` (quote and
//! certify by the AK, two links of the EK certificate chain) took about 1.3 ms natively that
//! way, nearly all of the call. Here the base enters the Montgomery domain by one schoolbook
//! division, each squaring and multiplication is a schoolbook product into one buffer followed
//! by a Montgomery reduction (REDC), and nothing allocates after the few buffers of one
//! exponentiation. Products and reductions take two rows per pass over the limbs: each limb is
//! loaded and stored once for two multiplications, and the two carry chains are independent
//! (in wasm this and unrolling the loop made it about 1.5 times faster than one row at a time).
//!
//! Not constant time, on purpose: the modulus, the exponent and the signature are all public, so
//! timing reveals nothing secret. Never use this with a private exponent.
//!
//! Limbs: `u64` with `u128` products where the machine multiplies 64×64→128 natively, `u32`
//! with `u64` products in wasm (one `i64.mul`; a `u128` product there is a compiler-rt call of
//! several multiplications). RSA-2048 with e = 65537 in wasmtime: 61 µs with u32 limbs, 128 µs
//! with u64 limbs; natively 17 µs with u64 limbs, 43 µs with u32 limbs. [`NativeLimb`] picks
//! one; both are tested natively.

use std::fmt;
use std::ops::{BitOr, Shl, Shr};

/// The smallest modulus accepted, in bits.
pub const MIN_MODULUS_BITS: usize = 2048;
/// The largest modulus accepted, in bits.
pub const MAX_MODULUS_BITS: usize = 4096;

/// The limb of this target (see the module documentation).
#[cfg(all(target_pointer_width = "64", not(target_family = "wasm")))]
pub type NativeLimb = u64;
/// The limb of this target (see the module documentation).
#[cfg(not(all(target_pointer_width = "64", not(target_family = "wasm"))))]
pub type NativeLimb = u32;

/// Why an exponentiation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModExpError {
    /// Montgomery reduction needs an odd modulus (an RSA modulus always is).
    EvenModulus,
    /// Outside [`MIN_MODULUS_BITS`]..=[`MAX_MODULUS_BITS`].
    ModulusSize(usize),
    /// The base is not reduced (base ≥ modulus).
    BaseNotReduced,
}

impl fmt::Display for ModExpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModExpError::EvenModulus => f.write_str("even modulus"),
            ModExpError::ModulusSize(bits) => {
                write!(f, "{bits}-bit modulus (from {MIN_MODULUS_BITS} to {MAX_MODULUS_BITS} bits)")
            }
            ModExpError::BaseNotReduced => f.write_str("base not below the modulus"),
        }
    }
}

impl std::error::Error for ModExpError {}

/// A machine word of a multi-precision integer.
pub trait Limb:
    Copy + Default + Eq + Ord + fmt::Debug + Shl<u32, Output = Self> + Shr<u32, Output = Self> + BitOr<Output = Self>
{
    const BITS: u32;
    const ZERO: Self;
    const ONE: Self;
    const MAX: Self;
    /// `acc + a·b + carry` as (low, high) limbs; it cannot overflow two limbs.
    fn mul_add(acc: Self, a: Self, b: Self, carry: Self) -> (Self, Self);
    /// `a + b + carry` and the carry out.
    fn add_carry(a: Self, b: Self, carry: bool) -> (Self, bool);
    /// `a - b - borrow` and the borrow out.
    fn sub_borrow(a: Self, b: Self, borrow: bool) -> (Self, bool);
    /// `(high·2^w + low) / divisor` for `high < divisor` (the quotient fits one limb).
    fn div_wide(high: Self, low: Self, divisor: Self) -> Self;
    fn wrapping_mul(self, other: Self) -> Self;
    fn wrapping_sub(self, other: Self) -> Self;
    fn wrapping_neg(self) -> Self;
    fn from_byte(byte: u8) -> Self;
    /// The least significant byte.
    fn low_byte(self) -> u8;
}

macro_rules! limb {
    ($limb:ty, $wide:ty) => {
        impl Limb for $limb {
            const BITS: u32 = <$limb>::BITS;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MAX: Self = <$limb>::MAX;

            #[inline(always)]
            fn mul_add(acc: Self, a: Self, b: Self, carry: Self) -> (Self, Self) {
                // (2^w - 1)^2 + 2(2^w - 1) = 2^2w - 1: fits.
                let wide = <$wide>::from(acc) + <$wide>::from(a) * <$wide>::from(b) + <$wide>::from(carry);
                (wide as $limb, (wide >> <$limb>::BITS) as $limb)
            }

            #[inline(always)]
            fn add_carry(a: Self, b: Self, carry: bool) -> (Self, bool) {
                let (sum, c1) = a.overflowing_add(b);
                let (sum, c2) = sum.overflowing_add(Self::from(carry));
                (sum, c1 | c2)
            }

            #[inline(always)]
            fn sub_borrow(a: Self, b: Self, borrow: bool) -> (Self, bool) {
                let (difference, b1) = a.overflowing_sub(b);
                let (difference, b2) = difference.overflowing_sub(Self::from(borrow));
                (difference, b1 | b2)
            }

            #[inline(always)]
            fn div_wide(high: Self, low: Self, divisor: Self) -> Self {
                let dividend = <$wide>::from(high) << <$limb>::BITS | <$wide>::from(low);
                (dividend / <$wide>::from(divisor.max(1))) as $limb
            }

            #[inline(always)]
            fn wrapping_mul(self, other: Self) -> Self {
                <$limb>::wrapping_mul(self, other)
            }

            #[inline(always)]
            fn wrapping_sub(self, other: Self) -> Self {
                <$limb>::wrapping_sub(self, other)
            }

            #[inline(always)]
            fn wrapping_neg(self) -> Self {
                <$limb>::wrapping_neg(self)
            }

            #[inline(always)]
            fn from_byte(byte: u8) -> Self {
                Self::from(byte)
            }

            #[inline(always)]
            fn low_byte(self) -> u8 {
                self as u8
            }
        }
    };
}

limb!(u32, u64);
limb!(u64, u128);

/// Little-endian limbs of the big-endian `bytes`, exactly `limbs` of them; `None` when the
/// value does not fit.
fn limbs_from_be<L: Limb>(bytes: &[u8], limbs: usize) -> Option<Vec<L>> {
    let per_limb = (L::BITS / 8) as usize;
    let mut out = vec![L::ZERO; limbs];
    let mut chunks = bytes.rchunks(per_limb);
    for (limb, chunk) in out.iter_mut().zip(chunks.by_ref()) {
        *limb = chunk.iter().fold(L::ZERO, |acc, byte| acc << 8 | L::from_byte(*byte));
    }
    // Whatever did not fit must be leading zeros.
    chunks.all(|chunk| chunk.iter().all(|byte| *byte == 0)).then_some(out)
}

/// The big-endian bytes of `limbs`, exactly `len` of them (the value must fit).
fn limbs_to_be<L: Limb>(limbs: &[L], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let bytes = limbs.iter().flat_map(|limb| (0..L::BITS / 8).map(move |i| (*limb >> (8 * i)).low_byte()));
    for (byte, value) in out.iter_mut().rev().zip(bytes) {
        *byte = value;
    }
    out
}

/// `a >= b`, same length.
fn greater_or_equal<L: Limb>(a: &[L], b: &[L]) -> bool {
    for (x, y) in a.iter().rev().zip(b.iter().rev()) {
        if x != y {
            return x > y;
        }
    }
    true
}

/// `a -= b`, same length; the borrow out.
fn subtract_in_place<L: Limb>(a: &mut [L], b: &[L]) -> bool {
    let mut borrow = false;
    for (x, y) in a.iter_mut().zip(b) {
        (*x, borrow) = L::sub_borrow(*x, *y, borrow);
    }
    borrow
}

/// `a <<= shift` for `shift < w`; what leaves the top limb is dropped (the caller knows it is
/// zero).
fn shift_left<L: Limb>(a: &mut [L], shift: u32) {
    if shift == 0 {
        return;
    }
    let mut carry = L::ZERO;
    for limb in a.iter_mut() {
        let next = *limb >> (L::BITS - shift);
        *limb = *limb << shift | carry;
        carry = next;
    }
}

/// `a >>= shift` for `shift < w`.
fn shift_right<L: Limb>(a: &mut [L], shift: u32) {
    if shift == 0 {
        return;
    }
    let mut carry = L::ZERO;
    for limb in a.iter_mut().rev() {
        let next = *limb << (L::BITS - shift);
        *limb = *limb >> shift | carry;
        carry = next;
    }
}

/// Two rows of a schoolbook product at once: `window[k] += x[k]·p + y[k]·q`, with the carries
/// of the two rows kept apart (each step fits two limbs); returns both carries.
#[inline(always)]
fn mul_add_two_rows<L: Limb>(window: &mut [L], x: &[L], y: &[L], p: L, q: L, carry_0: L, carry_1: L) -> (L, L) {
    let (mut carry_0, mut carry_1) = (carry_0, carry_1);
    let mut step = |w: &mut L, x_k: L, y_k: L| {
        let (sum, high_0) = L::mul_add(*w, x_k, p, carry_0);
        let (sum, high_1) = L::mul_add(sum, y_k, q, carry_1);
        (*w, carry_0, carry_1) = (sum, high_0, high_1);
    };
    // Eight limbs per iteration: fewer loop branches, and fewer interruption checks (wasmtime's
    // epoch check runs at every loop iteration).
    let (mut windows, mut xs, mut ys) = (window.chunks_exact_mut(8), x.chunks_exact(8), y.chunks_exact(8));
    for ((w, x8), y8) in windows.by_ref().zip(xs.by_ref()).zip(ys.by_ref()) {
        for ((w, x_k), y_k) in w.iter_mut().zip(x8).zip(y8) {
            step(w, *x_k, *y_k);
        }
    }
    for ((w, x_k), y_k) in windows.into_remainder().iter_mut().zip(xs.remainder()).zip(ys.remainder()) {
        step(w, *x_k, *y_k);
    }
    (carry_0, carry_1)
}

/// An odd modulus of [`MIN_MODULUS_BITS`]..=[`MAX_MODULUS_BITS`] bits, ready for Montgomery
/// arithmetic with R = 2^(limb bits × limbs).
#[derive(Debug, Clone)]
pub struct Modulus<L: Limb> {
    /// Little-endian limbs, the top one non-zero.
    n: Vec<L>,
    /// -n⁻¹ mod 2^(limb bits).
    n_prime: L,
    /// n shifted left until the top limb's top bit is set (for quotient estimates), and the
    /// shift.
    normalized: Vec<L>,
    shift: u32,
    /// The modulus's length in bytes (the length of signatures and of results).
    byte_len: usize,
}

// The `let ... else { return }` branches below cannot be taken: every slice length follows
// from `limbs` (at least 32). They stand where an index would otherwise panic; were one taken,
// the result would simply be wrong and the signature refused.
impl<L: Limb> Modulus<L> {
    /// The modulus of big-endian `bytes` (leading zeros allowed).
    pub fn from_be_bytes(bytes: &[u8]) -> Result<Modulus<L>, ModExpError> {
        let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
        let bytes = bytes.get(first..).unwrap_or_default();
        let top_bits = bytes.first().map_or(0, |b| 8 - b.leading_zeros() as usize);
        let bits = (bytes.len() * 8).saturating_sub(8) + top_bits;
        if !(MIN_MODULUS_BITS..=MAX_MODULUS_BITS).contains(&bits) {
            return Err(ModExpError::ModulusSize(bits));
        }
        if bytes.last().is_some_and(|b| b & 1 == 0) {
            return Err(ModExpError::EvenModulus);
        }
        let limb_bits = L::BITS as usize;
        let limbs = bits.div_ceil(limb_bits);
        let n = limbs_from_be::<L>(bytes, limbs).ok_or(ModExpError::ModulusSize(bits))?;
        let n0 = n.first().copied().unwrap_or(L::ONE);
        // Newton's iteration for n0⁻¹ mod 2^w: n0·n0 ≡ 1 (mod 8) for odd n0 (3 bits), and each
        // step doubles the bits: 6 steps give 192 ≥ 64.
        let mut inverse = n0;
        for _ in 0..6 {
            inverse = inverse.wrapping_mul((L::ONE << 1).wrapping_sub(n0.wrapping_mul(inverse)));
        }
        let shift = (limb_bits * limbs - bits) as u32;
        let mut normalized = n.clone();
        shift_left(&mut normalized, shift);
        Ok(Modulus { n, n_prime: inverse.wrapping_neg(), normalized, shift, byte_len: bytes.len() })
    }

    /// The modulus's length in bytes.
    pub fn byte_len(&self) -> usize {
        self.byte_len
    }

    fn limbs(&self) -> usize {
        self.n.len()
    }

    /// `x·R mod n` for `x < n` (into the Montgomery domain): `limbs` times, one limb shifted in
    /// and the remainder taken by schoolbook division with a one-limb quotient (Knuth's
    /// algorithm D, normalized so that the estimate is at most 2 too large). Cheaper than the
    /// alternative, a Montgomery multiplication by R² mod n, once R² has to be computed too.
    fn to_montgomery(&self, x: &[L], out: &mut [L]) {
        for (o, v) in out.iter_mut().zip(x) {
            *o = *v;
        }
        shift_left(out, self.shift);
        let divisor = self.normalized.last().copied().unwrap_or(L::ONE);
        for _ in 0..self.limbs() {
            // out·2^w = top·2^(w·limbs) + [out shifted up one limb]; the quotient estimate
            // comes from its two top limbs (top ≤ divisor as out < normalized).
            let top = out.last().copied().unwrap_or(L::ZERO);
            let next = out.iter().rev().nth(1).copied().unwrap_or(L::ZERO);
            let quotient = if top >= divisor { L::MAX } else { L::div_wide(top, next, divisor) };
            // out = out·2^w - quotient·normalized, the limbs moving up one as they are read.
            let (mut carry, mut borrow, mut previous) = (L::ZERO, false, L::ZERO);
            for (o, n_j) in out.iter_mut().zip(&self.normalized) {
                let (product, high) = L::mul_add(L::ZERO, quotient, *n_j, carry);
                let shifted_in = std::mem::replace(o, L::ZERO);
                (*o, borrow) = L::sub_borrow(previous, product, borrow);
                (carry, previous) = (high, shifted_in);
            }
            let (mut top, mut negative) = L::sub_borrow(previous, carry, borrow);
            // At most twice: the estimate is at most 2 too large.
            while negative {
                let mut carry = false;
                for (o, n_j) in out.iter_mut().zip(&self.normalized) {
                    (*o, carry) = L::add_carry(*o, *n_j, carry);
                }
                (top, _) = L::add_carry(top, L::ZERO, carry);
                negative = top != L::ZERO;
            }
        }
        shift_right(out, self.shift);
    }

    /// `base^exponent mod n` for big-endian `base` (below the modulus; leading zeros allowed)
    /// and `exponent` (any length, zero included), as big-endian bytes of the modulus's length.
    pub fn pow(&self, base: &[u8], exponent: &[u8]) -> Result<Vec<u8>, ModExpError> {
        let limbs = self.limbs();
        let base = limbs_from_be::<L>(base, limbs).ok_or(ModExpError::BaseNotReduced)?;
        if greater_or_equal(&base, &self.n) {
            return Err(ModExpError::BaseNotReduced);
        }
        let mut base_m = vec![L::ZERO; limbs];
        self.to_montgomery(&base, &mut base_m);

        let mut bits = exponent.iter().flat_map(|byte| (0..8).rev().map(move |i| byte >> i & 1 == 1));
        if !bits.by_ref().any(|bit| bit) {
            // x^0 = 1 (n > 1).
            let mut one = vec![L::ZERO; limbs];
            if let Some(low) = one.first_mut() {
                *low = L::ONE;
            }
            return Ok(limbs_to_be(&one, self.byte_len));
        }
        // Left to right from the top set bit: square, and multiply by the base for a set bit.
        let mut wide = vec![L::ZERO; 2 * limbs];
        let mut acc = base_m.clone();
        let mut next = vec![L::ZERO; limbs];
        let mut bits = bits.peekable();
        while let Some(bit) = bits.next() {
            self.square(&acc, &mut next, &mut wide);
            std::mem::swap(&mut acc, &mut next);
            if bit && bits.peek().is_none() {
                // The last multiplication, by the base itself rather than its Montgomery form,
                // leaves the domain: (a·R)·base·R⁻¹ = a·base.
                self.multiply(&acc, &base, &mut next, &mut wide);
                return Ok(limbs_to_be(&next, self.byte_len));
            }
            if bit {
                self.multiply(&acc, &base_m, &mut next, &mut wide);
                std::mem::swap(&mut acc, &mut next);
            }
        }
        // Out of the Montgomery domain: REDC(acc) = acc·R⁻¹.
        wide.fill(L::ZERO);
        for (w, a) in wide.iter_mut().zip(&acc) {
            *w = *a;
        }
        self.reduce(&mut wide, &mut next);
        Ok(limbs_to_be(&next, self.byte_len))
    }

    /// `out = a·b·R⁻¹ mod n` for `a, b < n`; `wide` has 2·limbs limbs. The product takes
    /// two rows (limbs of `b`) per pass, as [`Self::reduce`] does.
    fn multiply(&self, a: &[L], b: &[L], out: &mut [L], wide: &mut [L]) {
        let limbs = self.limbs();
        let (Some(&a_0), Some(&a_top), Some(a_low), Some(a_high)) =
            (a.first(), a.last(), a.get(..limbs - 1), a.get(1..))
        else {
            return;
        };
        wide.fill(L::ZERO);
        let mut pairs = b.chunks_exact(2);
        for (i, pair) in pairs.by_ref().enumerate() {
            let [p, q] = pair else { return };
            // wide[2i..] += a·p + a·2^w·q; wide[2i + limbs..] is still zero.
            let Some(window) = wide.get_mut(2 * i..=2 * i + limbs + 1) else { return };
            let Some((first, rest)) = window.split_first_mut() else { return };
            let (sum, carry_0) = L::mul_add(*first, a_0, *p, L::ZERO);
            *first = sum;
            let Some((middle, top)) = rest.split_at_mut_checked(limbs - 1) else { return };
            let (carry_0, carry_1) = mul_add_two_rows(middle, a_high, a_low, *p, *q, carry_0, L::ZERO);
            let [at_limbs, above] = top else { return };
            (*at_limbs, *above) = L::mul_add(carry_0, a_top, *q, carry_1);
        }
        if let [b_last] = pairs.remainder() {
            // An odd number of limbs: the last row alone.
            let i = limbs - 1;
            let Some((row, rest)) = wide.get_mut(i..).and_then(|w| w.split_at_mut_checked(limbs)) else {
                return;
            };
            let mut carry = L::ZERO;
            for (w, &a_j) in row.iter_mut().zip(a) {
                (*w, carry) = L::mul_add(*w, a_j, *b_last, carry);
            }
            if let Some(top) = rest.first_mut() {
                *top = carry;
            }
        }
        self.reduce(wide, out);
    }

    /// `out = a²·R⁻¹ mod n` for `a < n`: each cross product once (two rows per pass), doubled,
    /// plus the squares.
    fn square(&self, a: &[L], out: &mut [L], wide: &mut [L]) {
        let limbs = self.limbs();
        wide.fill(L::ZERO);
        let mut i = 0;
        // Rows i and i + 1: wide[2i + 1 + k] += a_i·a_(i+1+k) + a_(i+1)·a_(i+k) (the second from
        // k = 2: a_(i+1)² is a square, added below); wide[i + limbs..] is still zero.
        while i + 2 < limbs {
            let (Some(&p), Some(&q), Some(&after), Some(&a_top)) = (a.get(i), a.get(i + 1), a.get(i + 2), a.last())
            else {
                return;
            };
            let (Some(x), Some(y)) = (a.get(i + 3..), a.get(i + 2..limbs - 1)) else { return };
            let Some(window) = wide.get_mut(2 * i + 1..=i + limbs + 1) else { return };
            let Some(([w_0, w_1], rest)) = window.split_first_chunk_mut::<2>() else { return };
            let (sum, carry_0) = L::mul_add(*w_0, q, p, L::ZERO);
            *w_0 = sum;
            let (sum, carry_0) = L::mul_add(*w_1, after, p, carry_0);
            *w_1 = sum;
            let Some((middle, top)) = rest.split_at_mut_checked(limbs - i - 3) else { return };
            let (carry_0, carry_1) = mul_add_two_rows(middle, x, y, p, q, carry_0, L::ZERO);
            let [at_limbs, above] = top else { return };
            (*at_limbs, *above) = L::mul_add(carry_0, a_top, q, carry_1);
            i += 2;
        }
        if i + 1 < limbs {
            // The last row with cross products, alone: wide[2i + 1..] += a_i·a[i + 1..].
            let (Some(&a_i), Some(higher), Some(row)) = (a.get(i), a.get(i + 1..), wide.get_mut(2 * i + 1..)) else {
                return;
            };
            let Some((row, rest)) = row.split_at_mut_checked(higher.len()) else {
                return;
            };
            let mut carry = L::ZERO;
            for (w, &a_j) in row.iter_mut().zip(higher) {
                (*w, carry) = L::mul_add(*w, a_j, a_i, carry);
            }
            if let Some(top) = rest.first_mut() {
                *top = carry;
            }
        }
        // Double the cross products and add a_i² at 2i, limb pair by limb pair.
        let mut shifted_out = L::ZERO;
        let mut carry = false;
        for (pair, &a_i) in wide.chunks_exact_mut(2).zip(a) {
            let [low, high] = pair else { return };
            let doubled_low = *low << 1 | shifted_out;
            let doubled_high = *high << 1 | *low >> (L::BITS - 1);
            shifted_out = *high >> (L::BITS - 1);
            let (sum_low, square_high) = L::mul_add(doubled_low, a_i, a_i, L::from_byte(u8::from(carry)));
            let (sum_high, carry_out) = L::add_carry(doubled_high, square_high, false);
            (*low, *high, carry) = (sum_low, sum_high, carry_out);
        }
        self.reduce(wide, out);
    }

    /// Montgomery reduction: `out = wide·R⁻¹ mod n` for `wide < n·R` (2·limbs limbs,
    /// clobbered). Two rows (two multiples of n) per pass over the limbs: each limb is loaded
    /// and stored once for two products, and the rows' carry chains are independent.
    fn reduce(&self, wide: &mut [L], out: &mut [L]) {
        let limbs = self.limbs();
        let n = self.n.as_slice();
        let (Some(&n_0), Some(&n_1), Some(&n_top), Some(n_low), Some(n_high)) =
            (n.first(), n.get(1), n.last(), n.get(..limbs - 1), n.get(1..))
        else {
            return;
        };
        // The carry out of the pair's top limb (wide[i + limbs + 1]), into the next pair's.
        let mut overflow = false;
        let mut i = 0;
        while i + 1 < limbs {
            let Some(window) = wide.get_mut(i..=i + limbs + 1) else { return };
            let (Some(&w_0), Some(&w_1)) = (window.first(), window.get(1)) else { return };
            // m_0 clears window[0]; m_1 clears window[1] as row 0 leaves it.
            let m_0 = w_0.wrapping_mul(self.n_prime);
            let (_, carry_0) = L::mul_add(w_0, m_0, n_0, L::ZERO);
            let m_1 = L::mul_add(w_1, m_0, n_1, carry_0).0.wrapping_mul(self.n_prime);
            let Some((middle, top)) = window.get_mut(1..).and_then(|w| w.split_at_mut_checked(limbs - 1)) else {
                return;
            };
            // window[k] += n_k·m_0 + n_(k-1)·m_1 for k in 1..limbs.
            let (carry_0, carry_1) = mul_add_two_rows(middle, n_high, n_low, m_0, m_1, carry_0, L::ZERO);
            let [at_limbs, above] = top else { return };
            // window[limbs]: row 0's carry, the previous pair's overflow and row 1's last product.
            let (sum, carry) = L::add_carry(*at_limbs, carry_0, overflow);
            let (sum, high) = L::mul_add(sum, n_top, m_1, carry_1);
            *at_limbs = sum;
            (*above, overflow) = L::add_carry(*above, high, carry);
            i += 2;
        }
        if i < limbs {
            // An odd number of limbs: one row left.
            let Some((row, rest)) = wide.get_mut(i..).and_then(|w| w.split_at_mut_checked(limbs)) else {
                return;
            };
            let m = row.first().copied().unwrap_or(L::ZERO).wrapping_mul(self.n_prime);
            let mut carry = L::ZERO;
            for (w, &n_j) in row.iter_mut().zip(n) {
                (*w, carry) = L::mul_add(*w, m, n_j, carry);
            }
            if let Some(top) = rest.first_mut() {
                (*top, overflow) = L::add_carry(*top, carry, overflow);
            }
        }
        // The result is wide[limbs..] plus the overflow bit times R, below 2n.
        for (o, w) in out.iter_mut().zip(wide.iter().skip(limbs)) {
            *o = *w;
        }
        if overflow || greater_or_equal(out, &self.n) {
            subtract_in_place(out, &self.n);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use rsa::BigUint;

    use super::*;

    /// xorshift64*: deterministic, good enough to pick test operands.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, bound: u64) -> u64 {
            self.next() % bound
        }

        fn bytes(&mut self, len: usize) -> Vec<u8> {
            (0..len).map(|_| self.next() as u8).collect()
        }

        /// An odd number of exactly `bits` bits, big-endian.
        fn odd_modulus(&mut self, bits: usize) -> Vec<u8> {
            let mut bytes = self.bytes(bits.div_ceil(8));
            let top_bits = bits - 8 * (bytes.len() - 1);
            bytes[0] &= (0xffu16 >> (8 - top_bits)) as u8;
            bytes[0] |= 1 << (top_bits - 1);
            *bytes.last_mut().unwrap() |= 1;
            bytes
        }

        /// A number below `n`, sometimes with leading zero bytes.
        fn below_modulus(&mut self, n: &BigUint) -> Vec<u8> {
            let candidate = BigUint::from_bytes_be(&self.bytes(n.to_bytes_be().len())) % n;
            let bytes = candidate.to_bytes_be();
            let pad = n.to_bytes_be().len() - bytes.len() + usize::from(self.below(4) == 0);
            [vec![0u8; pad], bytes].concat()
        }
    }

    fn expected(n: &[u8], base: &[u8], exponent: &[u8]) -> Vec<u8> {
        let n_big = BigUint::from_bytes_be(n);
        let value = BigUint::from_bytes_be(base).modpow(&BigUint::from_bytes_be(exponent), &n_big).to_bytes_be();
        let len = n_big.to_bytes_be().len();
        [vec![0u8; len - value.len()], value].concat()
    }

    fn check<L: Limb>(n: &[u8], base: &[u8], exponent: &[u8]) {
        let modulus = Modulus::<L>::from_be_bytes(n).unwrap();
        let got = modulus.pow(base, exponent).unwrap();
        assert_eq!(
            got,
            expected(n, base, exponent),
            "{}-bit limbs, n {}, base {}, exponent {}",
            L::BITS,
            hex::encode(n),
            hex::encode(base),
            hex::encode(exponent)
        );
    }

    fn agrees_with_modpow<L: Limb>(seed: u64) {
        let mut rng = Rng(seed);
        let mut sizes = vec![2048, 2049, 2080, 2111, 3072, 3071, 4095, 4096];
        sizes.extend((0..12).map(|_| 2048 + rng.below(2049) as usize));
        for bits in sizes {
            let n = rng.odd_modulus(bits);
            let n_big = BigUint::from_bytes_be(&n);
            let mut exponents: Vec<Vec<u8>> =
                vec![vec![1, 0, 1], vec![3], vec![0, 0, 17], vec![1], rng.bytes(4), rng.bytes(8), rng.bytes(33)];
            if bits <= 2080 {
                exponents.push(rng.bytes(bits / 8));
            }
            for exponent in exponents {
                let base = rng.below_modulus(&n_big);
                check::<L>(&n, &base, &exponent);
            }
        }
    }

    #[test]
    fn u32_limbs_agree_with_modpow() {
        agrees_with_modpow::<u32>(0x7472_656c_6c69_7333);
    }

    #[test]
    fn u64_limbs_agree_with_modpow() {
        agrees_with_modpow::<u64>(0x7472_656c_6c69_7336);
    }

    fn edge_cases<L: Limb>() {
        let mut rng = Rng(0x6564_6765);
        // Top limb full (all ones at the top), 4096 and 2048 bits; a small top limb.
        let mut full_4096 = vec![0xffu8; 512];
        full_4096[511] = 0xf1;
        let mut full_2048 = rng.odd_modulus(2048);
        full_2048[..8].fill(0xff);
        for n in [full_4096, full_2048, rng.odd_modulus(4096), rng.odd_modulus(2049), rng.odd_modulus(3000)] {
            let n_big = BigUint::from_bytes_be(&n);
            let n_minus_one = (&n_big - 1u32).to_bytes_be();
            let random = rng.below_modulus(&n_big);
            for base in [vec![], vec![0], vec![1], vec![2], n_minus_one.clone(), random.clone()] {
                for exponent in [vec![], vec![0], vec![0, 0], vec![1], vec![2], vec![1, 0, 1], vec![0xff; 5]] {
                    check::<L>(&n, &base, &exponent);
                }
            }
            let modulus = Modulus::<L>::from_be_bytes(&n).unwrap();
            assert_eq!(modulus.byte_len(), n.len());
            // (n - 1)^2 = 1 and (n - 1)^e = n - 1 for odd e.
            assert_eq!(modulus.pow(&n_minus_one, &[2]).unwrap(), expected(&n, &[1], &[1]));
            assert_eq!(modulus.pow(&n_minus_one, &[1, 0, 1]).unwrap(), n_minus_one);
            // Leading zeros, in the modulus and the base.
            let padded = Modulus::<L>::from_be_bytes(&[vec![0, 0], n.clone()].concat()).unwrap();
            assert_eq!(padded.byte_len(), n.len());
            let padded_base = [vec![0; 9], random.clone()].concat();
            assert_eq!(padded.pow(&padded_base, &[1, 0, 1]).unwrap(), expected(&n, &random, &[1, 0, 1]));
            // Bases not below the modulus.
            let n_plus_one = (&n_big + 1u32).to_bytes_be();
            for base in [n.clone(), n_plus_one, vec![0xff; n.len()], [vec![1], vec![0; n.len()]].concat()] {
                assert_eq!(modulus.pow(&base, &[1, 0, 1]), Err(ModExpError::BaseNotReduced));
            }
        }
    }

    #[test]
    fn u32_limbs_edge_cases() {
        edge_cases::<u32>();
    }

    #[test]
    fn u64_limbs_edge_cases() {
        edge_cases::<u64>();
    }

    fn refused_moduli<L: Limb>() {
        let mut rng = Rng(0x0062_6164);
        let mut even = rng.odd_modulus(2048);
        *even.last_mut().unwrap() &= 0xfe;
        assert_eq!(Modulus::<L>::from_be_bytes(&even).unwrap_err(), ModExpError::EvenModulus);
        for bits in [0, 8, 1024, 2047, 4097, 8192] {
            let n = if bits == 0 { vec![] } else { rng.odd_modulus(bits) };
            assert_eq!(Modulus::<L>::from_be_bytes(&n).unwrap_err(), ModExpError::ModulusSize(bits));
        }
        assert_eq!(Modulus::<L>::from_be_bytes(&[0; 300]).unwrap_err(), ModExpError::ModulusSize(0));
    }

    /// Operands whose quotient estimates, entering the Montgomery domain, come out one too large
    /// (the correction adds the modulus back): the modulus's top limbs 0x80..00 0xff..ff, the
    /// base's 0x7f..ff 0xff..ff.
    fn quotient_estimate_corrections<L: Limb>() {
        let half = L::BITS as usize / 8;
        for limbs_set in [2, 3] {
            let mut n = vec![0xffu8; 256];
            n[0] = 0x80;
            n[1..half].fill(0);
            let mut base = vec![0xffu8; 256];
            base[0] = 0x7f;
            base[half * limbs_set..half * limbs_set + 1].fill(0xfe);
            check::<L>(&n, &base, &[1, 0, 1]);
            check::<L>(&n, &base, &[3]);
        }
    }

    #[test]
    fn quotient_estimates_that_are_too_large_are_corrected() {
        quotient_estimate_corrections::<u32>();
        quotient_estimate_corrections::<u64>();
    }

    #[test]
    fn even_and_out_of_range_moduli_are_refused() {
        refused_moduli::<u32>();
        refused_moduli::<u64>();
    }
}
