//! Reading the header of a GGUF file: its metadata key/values and its tensor table.
//!
//! GGUF (llama.cpp's single-file model format) starts with a header: the magic `GGUF`, a
//! version, the number of tensors and of metadata entries, the metadata entries themselves
//! (typed key/values: model hyper-parameters, the tokenizer's vocabulary and merges, the chat
//! template) and one record per tensor (name, shape, GGML type, offset into the data section).
//! This module reads that header into a [`GgufMetadata`] and never touches the tensor data:
//! the weights are loaded elsewhere (MLX reads them itself).
//!
//! Invariants:
//! - Only versions 2 and 3 are read (version 1 used 32-bit counts; no file in use has it). Both
//!   byte orders are accepted: a big-endian file is recognised by its byte-swapped version.
//! - Input is untrusted. Every length read from the file is checked against the bytes left in it
//!   before anything is allocated, nesting of arrays is bounded, and every failure is a
//!   [`GgufError`] naming the file, the byte offset and the problem. Nothing here panics.
//! - Reads go through a [`BufReader`]; the file is read once, front to back, up to the end of the
//!   tensor table.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

/// The four bytes every GGUF file starts with.
const MAGIC: [u8; 4] = *b"GGUF";
/// The versions this reader understands.
const SUPPORTED_VERSIONS: [u32; 2] = [2, 3];
/// Arrays may hold arrays; deeper nesting than this is treated as a corrupt file.
const MAX_ARRAY_NESTING: usize = 8;
/// ggml tensors have at most this many dimensions (`GGML_MAX_DIMS`).
const MAX_TENSOR_DIMS: u32 = 4;
/// The alignment of the tensor data section when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// Upper bound on the capacity reserved up front for a collection, whatever the file claims.
const MAX_PREALLOCATION: u64 = 1 << 16;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// The value as an unsigned integer, if it is an integer of any width and not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer of any width that fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v),
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is numeric (integers are converted, possibly rounding).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            GgufValue::U64(v) => Some(v as f64),
            GgufValue::I64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The value as a boolean, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a string slice, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(v) => Some(v),
            _ => None,
        }
    }

    /// The elements, if the value is an array.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(v) => Some(v),
            _ => None,
        }
    }

    /// The GGUF name of this value's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            GgufValue::U8(_) => "u8",
            GgufValue::I8(_) => "i8",
            GgufValue::U16(_) => "u16",
            GgufValue::I16(_) => "i16",
            GgufValue::U32(_) => "u32",
            GgufValue::I32(_) => "i32",
            GgufValue::U64(_) => "u64",
            GgufValue::I64(_) => "i64",
            GgufValue::F32(_) => "f32",
            GgufValue::F64(_) => "f64",
            GgufValue::Bool(_) => "bool",
            GgufValue::String(_) => "string",
            GgufValue::Array(_) => "array",
        }
    }
}

/// Where one tensor lives in the file and how it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// Dimensions as GGUF lists them: fastest-moving first (the reverse of row-major shape order).
    pub dims: Vec<u64>,
    /// The `ggml_type` code (0 = F32, 1 = F16, 2 = Q4_0, 3 = Q4_1, 8 = Q8_0, ...).
    pub ggml_type: u32,
    /// Offset of the tensor's bytes from the start of the data section ([`GgufMetadata::data_offset`]).
    pub offset: u64,
}

/// The header of a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufMetadata {
    /// The GGUF format version (2 or 3).
    pub version: u32,
    /// Metadata key/values, such as `general.architecture` or `tokenizer.ggml.tokens`.
    pub kv: BTreeMap<String, GgufValue>,
    /// The tensor table, in file order.
    pub tensors: Vec<GgufTensorInfo>,
    /// Absolute file offset where the tensor data section starts (the end of the header rounded
    /// up to `general.alignment`).
    pub data_offset: u64,
}

/// A GGUF header could not be read.
#[derive(Debug, thiserror::Error)]
#[error("GGUF file {}: {kind}", path.display())]
pub struct GgufError {
    /// The file being read.
    pub path: PathBuf,
    /// What went wrong.
    pub kind: GgufErrorKind,
}

/// What was wrong with a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufErrorKind {
    #[error("cannot read it: {0}")]
    Io(#[source] io::Error),
    #[error("not a GGUF file (starts with bytes {found:02x?}, expected \"GGUF\")")]
    BadMagic { found: Vec<u8> },
    #[error("GGUF version {0} is not supported (this reader handles versions 2 and 3)")]
    UnsupportedVersion(u32),
    #[error("truncated: {what} at byte {offset} runs past the end of the file")]
    Truncated { what: String, offset: u64 },
    #[error("{what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 { what: String, offset: u64 },
    #[error(
        "{what} at byte {offset} claims {claimed} entries or bytes, more than the {remaining} bytes left in the file"
    )]
    AbsurdLength {
        what: String,
        offset: u64,
        claimed: u64,
        remaining: u64,
    },
    #[error("{what} at byte {offset} has unknown value type {value_type}")]
    UnknownValueType {
        what: String,
        offset: u64,
        value_type: u32,
    },
    #[error("{what} at byte {offset}: arrays nested more than {MAX_ARRAY_NESTING} deep")]
    NestingTooDeep { what: String, offset: u64 },
    #[error("tensor {name:?} at byte {offset} has {dims} dimensions (at most {MAX_TENSOR_DIMS} allowed)")]
    TooManyDims {
        name: String,
        offset: u64,
        dims: u32,
    },
    #[error("metadata key {key:?} appears twice (second time at byte {offset})")]
    DuplicateKey { key: String, offset: u64 },
    #[error("general.alignment is {0}; it must be a non-zero power of two")]
    BadAlignment(u64),
}

impl GgufMetadata {
    /// Reads the header (metadata and tensor table) of the GGUF file at `path`.
    ///
    /// Tensor data is not read.
    pub fn read(path: &Path) -> Result<Self, GgufError> {
        let error = |kind| GgufError {
            path: path.to_path_buf(),
            kind,
        };
        let file = File::open(path).map_err(|e| error(GgufErrorKind::Io(e)))?;
        let file_size = file
            .metadata()
            .map_err(|e| error(GgufErrorKind::Io(e)))?
            .len();
        Self::parse(BufReader::new(file), file_size).map_err(error)
    }

    /// Parses a header from `reader`, which holds `len` bytes in all.
    fn parse<R: Read>(reader: R, len: u64) -> Result<Self, GgufErrorKind> {
        let mut r = HeaderReader {
            inner: reader,
            position: 0,
            len,
            big_endian: false,
        };

        let magic = r.bytes_fixed::<4>(&"magic")?;
        if magic != MAGIC {
            return Err(GgufErrorKind::BadMagic {
                found: magic.to_vec(),
            });
        }
        let raw_version = r.bytes_fixed::<4>(&"version")?;
        let mut version = u32::from_le_bytes(raw_version);
        if !SUPPORTED_VERSIONS.contains(&version) {
            let swapped = u32::from_be_bytes(raw_version);
            if SUPPORTED_VERSIONS.contains(&swapped) {
                r.big_endian = true;
                version = swapped;
            } else {
                return Err(GgufErrorKind::UnsupportedVersion(version));
            }
        }

        let tensor_count = r.u64(&"tensor count")?;
        let kv_count = r.u64(&"metadata entry count")?;
        // A key/value takes at least 13 bytes and a tensor record at least 24, so a count larger
        // than the file is certainly corrupt; checking it keeps the loops below bounded.
        r.check_count(kv_count, &"metadata entry count")?;
        r.check_count(tensor_count, &"tensor count")?;

        let mut kv = BTreeMap::new();
        for index in 0..kv_count {
            let offset = r.position;
            let key = r.string(&format_args!("key of metadata entry {index}"))?;
            let value_type = r.u32(&format_args!("value type of {key:?}"))?;
            let value = r.value(value_type, &key, 0)?;
            if kv.insert(key.clone(), value).is_some() {
                return Err(GgufErrorKind::DuplicateKey { key, offset });
            }
        }

        let mut tensors = Vec::with_capacity(capacity(tensor_count));
        for index in 0..tensor_count {
            let name = r.string(&format_args!("name of tensor {index}"))?;
            let offset = r.position;
            let n_dims = r.u32(&format_args!("dimension count of tensor {name:?}"))?;
            if n_dims > MAX_TENSOR_DIMS {
                return Err(GgufErrorKind::TooManyDims {
                    name,
                    offset,
                    dims: n_dims,
                });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64(&format_args!("dimensions of tensor {name:?}"))?);
            }
            let ggml_type = r.u32(&format_args!("type of tensor {name:?}"))?;
            let offset = r.u64(&format_args!("data offset of tensor {name:?}"))?;
            tensors.push(GgufTensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }

        let alignment = match kv.get("general.alignment") {
            Some(value) => value.as_u64().unwrap_or(0),
            None => DEFAULT_ALIGNMENT,
        };
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufErrorKind::BadAlignment(alignment));
        }
        let data_offset = r.position.div_ceil(alignment).saturating_mul(alignment);

        Ok(GgufMetadata {
            version,
            kv,
            tensors,
            data_offset,
        })
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.kv.get(key)
    }

    /// The string stored under `key`, if there is one.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// The integer (of any width, not negative) stored under `key`.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// The integer (of any width, fitting an `i64`) stored under `key`.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// The number (integer or float) stored under `key`, as a float.
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key)?.as_f64()
    }

    /// The boolean stored under `key`.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// The array stored under `key`, if every element is a string.
    pub fn get_str_array(&self, key: &str) -> Option<Vec<&str>> {
        self.get(key)?
            .as_array()?
            .iter()
            .map(GgufValue::as_str)
            .collect()
    }

    /// The array stored under `key`, if every element is a non-negative integer.
    pub fn get_u64_array(&self, key: &str) -> Option<Vec<u64>> {
        self.get(key)?
            .as_array()?
            .iter()
            .map(GgufValue::as_u64)
            .collect()
    }

    /// The array stored under `key`, if every element is an integer fitting an `i64`.
    pub fn get_i64_array(&self, key: &str) -> Option<Vec<i64>> {
        self.get(key)?
            .as_array()?
            .iter()
            .map(GgufValue::as_i64)
            .collect()
    }

    /// The array stored under `key`, if every element is numeric, as floats.
    pub fn get_f64_array(&self, key: &str) -> Option<Vec<f64>> {
        self.get(key)?
            .as_array()?
            .iter()
            .map(GgufValue::as_f64)
            .collect()
    }

    /// `general.architecture`, such as `"llama"` or `"qwen3"`.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }
}

impl fmt::Display for GgufValue {
    /// A short rendering for logs: arrays show their length, not their contents.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufValue::U8(v) => write!(f, "{v}"),
            GgufValue::I8(v) => write!(f, "{v}"),
            GgufValue::U16(v) => write!(f, "{v}"),
            GgufValue::I16(v) => write!(f, "{v}"),
            GgufValue::U32(v) => write!(f, "{v}"),
            GgufValue::I32(v) => write!(f, "{v}"),
            GgufValue::U64(v) => write!(f, "{v}"),
            GgufValue::I64(v) => write!(f, "{v}"),
            GgufValue::F32(v) => write!(f, "{v}"),
            GgufValue::F64(v) => write!(f, "{v}"),
            GgufValue::Bool(v) => write!(f, "{v}"),
            GgufValue::String(v) => write!(f, "{v:?}"),
            GgufValue::Array(v) => write!(f, "[{} elements]", v.len()),
        }
    }
}

/// How many elements to reserve for a collection the file says holds `count`.
fn capacity(count: u64) -> usize {
    usize::try_from(count.min(MAX_PREALLOCATION)).unwrap_or(0)
}

/// A cursor over the header bytes that knows how many bytes are left.
struct HeaderReader<R> {
    inner: R,
    position: u64,
    len: u64,
    big_endian: bool,
}

impl<R: Read> HeaderReader<R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.position)
    }

    fn truncated(&self, what: &dyn fmt::Display) -> GgufErrorKind {
        GgufErrorKind::Truncated {
            what: what.to_string(),
            offset: self.position,
        }
    }

    /// Fails unless `count` entries of at least one byte each could fit in the rest of the file.
    fn check_count(&self, count: u64, what: &dyn fmt::Display) -> Result<(), GgufErrorKind> {
        if count > self.remaining() {
            return Err(GgufErrorKind::AbsurdLength {
                what: what.to_string(),
                offset: self.position,
                claimed: count,
                remaining: self.remaining(),
            });
        }
        Ok(())
    }

    fn fill(&mut self, buf: &mut [u8], what: &dyn fmt::Display) -> Result<(), GgufErrorKind> {
        if (buf.len() as u64) > self.remaining() {
            return Err(self.truncated(what));
        }
        match self.inner.read_exact(buf) {
            Ok(()) => {
                self.position += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(self.truncated(what)),
            Err(e) => Err(GgufErrorKind::Io(e)),
        }
    }

    fn bytes_fixed<const N: usize>(
        &mut self,
        what: &dyn fmt::Display,
    ) -> Result<[u8; N], GgufErrorKind> {
        let mut buf = [0u8; N];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    fn u32(&mut self, what: &dyn fmt::Display) -> Result<u32, GgufErrorKind> {
        let b = self.bytes_fixed::<4>(what)?;
        Ok(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self, what: &dyn fmt::Display) -> Result<u64, GgufErrorKind> {
        let b = self.bytes_fixed::<8>(what)?;
        Ok(if self.big_endian {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    fn string(&mut self, what: &dyn fmt::Display) -> Result<String, GgufErrorKind> {
        let offset = self.position;
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(GgufErrorKind::AbsurdLength {
                what: what.to_string(),
                offset,
                claimed: len,
                remaining: self.remaining(),
            });
        }
        // `len` fits in the remaining file size, which fit in memory as a u64 file length; on a
        // 32-bit target a huge file could still overflow usize, so convert checked.
        let len = usize::try_from(len).map_err(|_| self.truncated(what))?;
        let mut buf = vec![0u8; len];
        self.fill(&mut buf, what)?;
        String::from_utf8(buf).map_err(|_| GgufErrorKind::InvalidUtf8 {
            what: what.to_string(),
            offset,
        })
    }

    /// Reads one value of GGUF type `value_type`; `key` and `depth` are for messages and nesting.
    fn value(
        &mut self,
        value_type: u32,
        key: &str,
        depth: usize,
    ) -> Result<GgufValue, GgufErrorKind> {
        macro_rules! num {
            ($variant:ident, $ty:ty) => {{
                let b = self.bytes_fixed::<{ std::mem::size_of::<$ty>() }>(&format_args!(
                    "value of {key:?}"
                ))?;
                GgufValue::$variant(if self.big_endian {
                    <$ty>::from_be_bytes(b)
                } else {
                    <$ty>::from_le_bytes(b)
                })
            }};
        }
        Ok(match value_type {
            0 => num!(U8, u8),
            1 => num!(I8, i8),
            2 => num!(U16, u16),
            3 => num!(I16, i16),
            4 => num!(U32, u32),
            5 => num!(I32, i32),
            6 => num!(F32, f32),
            7 => {
                let [b] = self.bytes_fixed::<1>(&format_args!("value of {key:?}"))?;
                GgufValue::Bool(b != 0)
            }
            8 => GgufValue::String(self.string(&format_args!("value of {key:?}"))?),
            9 => {
                let offset = self.position;
                if depth >= MAX_ARRAY_NESTING {
                    return Err(GgufErrorKind::NestingTooDeep {
                        what: format!("value of {key:?}"),
                        offset,
                    });
                }
                let element_type = self.u32(&format_args!("element type of {key:?}"))?;
                let count = self.u64(&format_args!("length of {key:?}"))?;
                if count > self.remaining() {
                    return Err(GgufErrorKind::AbsurdLength {
                        what: format!("array {key:?}"),
                        offset,
                        claimed: count,
                        remaining: self.remaining(),
                    });
                }
                let mut elements = Vec::with_capacity(capacity(count));
                for _ in 0..count {
                    elements.push(self.value(element_type, key, depth + 1)?);
                }
                GgufValue::Array(elements)
            }
            10 => num!(U64, u64),
            11 => num!(I64, i64),
            12 => num!(F64, f64),
            other => {
                return Err(GgufErrorKind::UnknownValueType {
                    what: format!("value of {key:?}"),
                    offset: self.position.saturating_sub(4),
                    value_type: other,
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds GGUF headers byte by byte, little-endian unless asked otherwise.
    struct Builder {
        bytes: Vec<u8>,
        big_endian: bool,
    }

    impl Builder {
        fn new(version: u32, tensors: u64, kvs: u64) -> Self {
            Self::with_endianness(version, tensors, kvs, false)
        }

        fn with_endianness(version: u32, tensors: u64, kvs: u64, big_endian: bool) -> Self {
            let mut b = Builder {
                bytes: MAGIC.to_vec(),
                big_endian,
            };
            b.u32(version).u64(tensors).u64(kvs);
            b
        }

        fn u32(&mut self, v: u32) -> &mut Self {
            let bytes = if self.big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            self.bytes.extend_from_slice(&bytes);
            self
        }

        fn u64(&mut self, v: u64) -> &mut Self {
            let bytes = if self.big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            self.bytes.extend_from_slice(&bytes);
            self
        }

        fn raw(&mut self, v: &[u8]) -> &mut Self {
            self.bytes.extend_from_slice(v);
            self
        }

        fn string(&mut self, s: &str) -> &mut Self {
            self.u64(s.len() as u64).raw(s.as_bytes())
        }

        fn kv_string(&mut self, key: &str, value: &str) -> &mut Self {
            self.string(key).u32(8).string(value)
        }

        fn kv_u32(&mut self, key: &str, value: u32) -> &mut Self {
            self.string(key).u32(4).u32(value)
        }

        fn parse(&self) -> Result<GgufMetadata, GgufErrorKind> {
            GgufMetadata::parse(self.bytes.as_slice(), self.bytes.len() as u64)
        }
    }

    fn sample() -> Builder {
        let mut b = Builder::new(3, 1, 6);
        b.kv_string("general.architecture", "llama")
            .kv_u32("llama.block_count", 30)
            .string("llama.rope.freq_base")
            .u32(6)
            .raw(&100000f32.to_le_bytes())
            .string("tokenizer.ggml.add_bos_token")
            .u32(7)
            .raw(&[1])
            .string("tokenizer.ggml.tokens")
            .u32(9)
            .u32(8)
            .u64(3)
            .string("<s>")
            .string("a")
            .string("é")
            .string("tokenizer.ggml.token_type")
            .u32(9)
            .u32(5)
            .u64(3)
            .raw(&3i32.to_le_bytes())
            .raw(&1i32.to_le_bytes())
            .raw(&(-1i32).to_le_bytes());
        b.string("token_embd.weight")
            .u32(2)
            .u64(576)
            .u64(49152)
            .u32(3)
            .u64(0);
        b
    }

    #[test]
    fn reads_a_well_formed_header() {
        let meta = sample().parse().expect("valid header");
        assert_eq!(meta.version, 3);
        assert_eq!(meta.architecture(), Some("llama"));
        assert_eq!(meta.get_u64("llama.block_count"), Some(30));
        assert_eq!(meta.get_f64("llama.block_count"), Some(30.0));
        assert_eq!(meta.get_f64("llama.rope.freq_base"), Some(100000.0));
        assert_eq!(meta.get_bool("tokenizer.ggml.add_bos_token"), Some(true));
        assert_eq!(
            meta.get_str_array("tokenizer.ggml.tokens"),
            Some(vec!["<s>", "a", "é"])
        );
        assert_eq!(
            meta.get_i64_array("tokenizer.ggml.token_type"),
            Some(vec![3, 1, -1])
        );
        // -1 is not a u64, so the u64 view of the array is absent.
        assert_eq!(meta.get_u64_array("tokenizer.ggml.token_type"), None);
        assert_eq!(meta.get_str("llama.block_count"), None);
        assert_eq!(meta.get("missing"), None);
        assert_eq!(
            meta.tensors,
            vec![GgufTensorInfo {
                name: "token_embd.weight".into(),
                dims: vec![576, 49152],
                ggml_type: 3,
                offset: 0,
            }]
        );
        let header_len = sample().bytes.len() as u64;
        assert_eq!(meta.data_offset, header_len.div_ceil(32) * 32);
    }

    #[test]
    fn reads_big_endian_files() {
        let mut b = Builder::with_endianness(3, 0, 2, true);
        b.kv_u32("llama.block_count", 7)
            .kv_string("general.architecture", "llama");
        let meta = b.parse().expect("big-endian header");
        assert_eq!(meta.get_u64("llama.block_count"), Some(7));
        assert_eq!(meta.architecture(), Some("llama"));
    }

    #[test]
    fn rejects_bad_magic() {
        let mut bytes = sample().bytes;
        bytes[..4].copy_from_slice(b"GGML");
        let err = GgufMetadata::parse(bytes.as_slice(), bytes.len() as u64).unwrap_err();
        assert!(matches!(err, GgufErrorKind::BadMagic { .. }), "{err}");
        let err = GgufMetadata::parse(&b"PK\x03\x04"[..], 4).unwrap_err();
        assert!(err.to_string().contains("not a GGUF file"), "{err}");
    }

    #[test]
    fn rejects_unsupported_versions() {
        for version in [0, 1, 4, 0xdead_beef] {
            let err = Builder::new(version, 0, 0).parse().unwrap_err();
            assert!(
                matches!(err, GgufErrorKind::UnsupportedVersion(v) if v == version),
                "{err}"
            );
        }
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let bytes = sample().bytes;
        for cut in 0..bytes.len() {
            let err = GgufMetadata::parse(&bytes[..cut], cut as u64).unwrap_err();
            assert!(
                matches!(
                    err,
                    GgufErrorKind::Truncated { .. } | GgufErrorKind::AbsurdLength { .. }
                ),
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn a_lying_length_is_truncation_even_if_the_reader_ends_early() {
        // The reader runs dry before the declared size: read_exact's EOF must become Truncated.
        let bytes = sample().bytes;
        let err = GgufMetadata::parse(&bytes[..40], bytes.len() as u64).unwrap_err();
        assert!(matches!(err, GgufErrorKind::Truncated { .. }), "{err}");
    }

    #[test]
    fn rejects_absurd_lengths_without_allocating() {
        // A string claiming u64::MAX bytes.
        let mut b = Builder::new(3, 0, 1);
        b.u64(u64::MAX).raw(b"key");
        let err = b.parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::AbsurdLength { .. }), "{err}");

        // An array claiming 2^60 elements.
        let mut b = Builder::new(3, 0, 1);
        b.string("tokenizer.ggml.tokens").u32(9).u32(8).u64(1 << 60);
        let err = b.parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::AbsurdLength { .. }), "{err}");

        // Entry counts larger than the file.
        let err = Builder::new(3, 0, u64::MAX).parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::AbsurdLength { .. }), "{err}");
        let err = Builder::new(3, 1 << 40, 0).parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::AbsurdLength { .. }), "{err}");
    }

    #[test]
    fn rejects_invalid_utf8() {
        let mut b = Builder::new(3, 0, 1);
        b.u64(2).raw(&[0xff, 0xfe]).u32(4).u32(0);
        let err = b.parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::InvalidUtf8 { .. }), "{err}");

        let mut b = Builder::new(3, 0, 1);
        b.string("general.name").u32(8).u64(1).raw(&[0xc3]);
        let err = b.parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::InvalidUtf8 { .. }), "{err}");
    }

    #[test]
    fn rejects_unknown_types_deep_nesting_and_bad_tensors() {
        let mut b = Builder::new(3, 0, 1);
        b.string("x").u32(13).u32(0);
        let err = b.parse().unwrap_err();
        assert!(
            matches!(err, GgufErrorKind::UnknownValueType { value_type: 13, .. }),
            "{err}"
        );

        let mut b = Builder::new(3, 0, 1);
        b.string("x").u32(9);
        for _ in 0..=MAX_ARRAY_NESTING {
            b.u32(9).u64(1);
        }
        b.raw(&[0; 64]);
        let err = b.parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::NestingTooDeep { .. }), "{err}");

        let mut b = Builder::new(3, 1, 0);
        b.string("t").u32(5).raw(&[0; 64]);
        let err = b.parse().unwrap_err();
        assert!(
            matches!(err, GgufErrorKind::TooManyDims { dims: 5, .. }),
            "{err}"
        );

        let mut b = Builder::new(3, 0, 2);
        b.kv_u32("a", 1).kv_u32("a", 2);
        let err = b.parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::DuplicateKey { .. }), "{err}");

        let mut b = Builder::new(3, 0, 1);
        b.kv_u32("general.alignment", 24);
        let err = b.parse().unwrap_err();
        assert!(matches!(err, GgufErrorKind::BadAlignment(24)), "{err}");
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic fuzz: flip bytes of a valid header and parse every variant.
        let base = sample().bytes;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5000 {
            let mut bytes = base.clone();
            for _ in 0..4 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let index = (state % bytes.len() as u64) as usize;
                bytes[index] = (state >> 32) as u8;
            }
            let _ = GgufMetadata::parse(bytes.as_slice(), bytes.len() as u64);
        }
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("broken.gguf");
        std::fs::write(&path, b"GGUF\x03\x00").expect("write");
        let err = GgufMetadata::read(&path).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("broken.gguf"), "{message}");
        assert!(message.contains("truncated"), "{message}");

        let err = GgufMetadata::read(&dir.path().join("absent.gguf")).unwrap_err();
        assert!(matches!(err.kind, GgufErrorKind::Io(_)), "{err}");
        assert!(err.to_string().contains("absent.gguf"), "{err}");
    }
}
