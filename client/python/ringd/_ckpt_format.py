"""The file format of one rank's part of a checkpoint.

Loading a part runs no code from the file (no pickle), and the same state
always gives the same bytes. A part is a header, a JSON description of the
state, and the raw bytes of its arrays and tensors ("blobs"):

    offset 0   b"RINGDCKP"
           8   u32 version (1), u32 zero
          16   u64 length L of the JSON text
          24   the JSON text (UTF-8), then zeros up to a multiple of 64: the
               data section, where each blob starts at a multiple of 64

The JSON is {"state": VALUE, "blobs": [[offset, length], ...]} with offsets
relative to the data section. A VALUE is None, a bool, an int (exact), a float
(exact: repr, NaN, Infinity), a str or a list as itself; anything else is an
object tagged by "T":

    {"T": "tuple", "v": [...]}
    {"T": "dict", "k": [...], "v": [...]}      keys of any supported type
    {"T": "odict", "k", "v", "m": VALUE}       OrderedDict; m: its _metadata
                                               (what Module.state_dict() keeps)
    {"T": "complex", "v": [re, im]}
    {"T": "bytes", "b": BLOB}
    {"T": "nd", "dtype": "<f4", "shape": [...], "b": BLOB}   numpy.ndarray
    {"T": "np", "dtype": "<f8", "b": BLOB}                   NumPy scalar
    {"T": "tensor", "dtype": "float32", "shape": [...], "b": BLOB,
     "param": bool, "grad": bool}              torch.Tensor, nn.Parameter

Subclasses of the containers come back as their base type (a namedtuple or a
torch.Size as a tuple, a defaultdict as a dict). Tensors are saved from the
CPU and come back on the CPU. torch is imported only to load a tensor, so a
NumPy-only state needs no torch.
"""

import collections
import json
import struct
import sys

import numpy as np

MAGIC = b"RINGDCKP"
VERSION = 1
ALIGN = 64
_HEADER = struct.Struct("<8sIIQ")
HEADER_SIZE = _HEADER.size  # 24

# NumPy kinds whose bytes are the whole value: bool, ints, floats, complex.
_ND_KINDS = "biufc"

# torch dtype name -> the NumPy dtype holding the same bytes.
_TENSOR_DTYPES = {
    "float64": "<f8",
    "float32": "<f4",
    "float16": "<f2",
    "bfloat16": "<i2",  # bit patterns; viewed back as torch.bfloat16
    "int64": "<i8",
    "int32": "<i4",
    "int16": "<i2",
    "int8": "i1",
    "uint8": "u1",
    "bool": "?",
    "complex64": "<c8",
    "complex128": "<c16",
}


class FormatError(ValueError):
    """A part that is not a ringd checkpoint part, or is damaged."""


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _torch():
    return sys.modules.get("torch")


class _Encoder:
    """Walks a state, building the JSON value and the list of blobs. copy:
    every blob is a private copy (for a background save), else a view of
    the caller's memory."""

    def __init__(self, copy):
        self.copy = copy
        self.blobs = []

    def blob(self, buf):
        self.blobs.append(buf)
        return len(self.blobs) - 1

    def array_blob(self, arr):
        arr = np.ascontiguousarray(arr)
        if self.copy:
            arr = arr.copy()
        return self.blob(memoryview(arr.reshape(-1).view(np.uint8)))

    def value(self, x, path):
        if x is None or isinstance(x, bool):
            return x
        if isinstance(x, str):
            return str(x)
        if isinstance(x, np.generic):
            return self.scalar(x, path)
        if isinstance(x, int):
            return int(x)
        if isinstance(x, float):
            return float(x)
        if isinstance(x, complex):
            return {"T": "complex", "v": [x.real, x.imag]}
        if isinstance(x, (bytes, bytearray, memoryview)):
            return {"T": "bytes", "b": self.blob(bytes(x))}
        if isinstance(x, np.ndarray):
            return self.ndarray(x, path)
        torch = _torch()
        if torch is not None and isinstance(x, torch.Tensor):
            return self.tensor(torch, x, path)
        if isinstance(x, list):
            return [self.value(v, f"{path}[{i}]") for i, v in enumerate(x)]
        if isinstance(x, tuple):
            return {"T": "tuple", "v": [self.value(v, f"{path}[{i}]") for i, v in enumerate(x)]}
        if isinstance(x, dict):
            return self.mapping(x, path)
        raise TypeError(
            f"{path}: cannot save a {type(x).__module__}.{type(x).__qualname__} in a checkpoint "
            "(it holds None, bool, int, float, complex, str, bytes, lists, tuples, dicts, "
            "NumPy arrays and scalars, and torch tensors)"
        )

    def mapping(self, x, path):
        keys, values = [], []
        for k, v in x.items():
            keys.append(self.value(k, f"{path} key {k!r}"))
            values.append(self.value(v, f"{path}[{k!r}]"))
        out = {"T": "dict", "k": keys, "v": values}
        if isinstance(x, collections.OrderedDict):
            out["T"] = "odict"
            meta = getattr(x, "_metadata", None)
            if meta is not None:
                out["m"] = self.value(meta, f"{path}._metadata")
        return out

    def check_dtype(self, dt, path):
        if dt.kind not in _ND_KINDS or dt.fields is not None or dt.subdtype is not None:
            raise TypeError(f"{path}: cannot save NumPy dtype {dt} (bool, int, float or complex)")

    def ndarray(self, x, path):
        self.check_dtype(x.dtype, path)
        return {"T": "nd", "dtype": x.dtype.str, "shape": list(x.shape), "b": self.array_blob(x)}

    def scalar(self, x, path):
        self.check_dtype(x.dtype, path)
        return {"T": "np", "dtype": x.dtype.str, "b": self.array_blob(np.asarray(x))}

    def tensor(self, torch, x, path):
        name = str(x.dtype).replace("torch.", "")
        if name not in _TENSOR_DTYPES or x.layout != torch.strided or x.is_quantized:
            raise TypeError(f"{path}: cannot save a {x.layout} tensor of {x.dtype}")
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if name == "bfloat16":
            t = t.view(torch.int16)
        # numpy() shares the tensor's memory; array_blob copies it if asked.
        arr = t.contiguous().numpy()
        return {
            "T": "tensor",
            "dtype": name,
            "shape": list(x.shape),
            "b": self.array_blob(arr),
            "param": isinstance(x, torch.nn.Parameter),
            "grad": bool(x.requires_grad),
        }


def encode(state, copy=False):
    """(head, blobs, size): the bytes before the data section, the blobs to
    write at their offsets (see layout()), and the part's total size."""
    enc = _Encoder(copy)
    value = enc.value(state, "state")
    offsets, end = [], 0
    for b in enc.blobs:
        n = memoryview(b).nbytes
        offsets.append([end, n])
        end = _align(end + n)
    text = json.dumps({"state": value, "blobs": offsets}, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=True).encode("utf-8")
    head = _HEADER.pack(MAGIC, VERSION, 0, len(text)) + text
    head += bytes(_align(len(head)) - len(head))
    size = len(head) + (offsets[-1][0] + offsets[-1][1] if offsets else 0)
    return head, enc.blobs, size


def chunks(head, blobs):
    """The bytes of a part in order: head, then each blob with the zeros
    that align the next one."""
    yield head
    pos = 0
    for i, b in enumerate(blobs):
        n = memoryview(b).nbytes
        yield b
        pos += n
        if i + 1 < len(blobs):
            pad = _align(pos) - pos
            if pad:
                yield bytes(pad)
            pos += pad


# ---- loading ----------------------------------------------------------------


class _Decoder:
    def __init__(self, data, base, blobs, what):
        self.data = data  # a writable uint8 array holding the whole part
        self.base = base
        self.blobs = blobs
        self.what = what
        self.torch = None

    def fail(self, why):
        raise FormatError(f"{self.what}: {why}")

    def blob(self, i):
        if not isinstance(i, int) or not 0 <= i < len(self.blobs):
            self.fail(f"blob index {i!r} out of range")
        off, n = self.blobs[i]
        return self.data[self.base + off : self.base + off + n]

    def array(self, obj, dtype, shape):
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            self.fail(f"bad shape {shape!r}")
        raw = self.blob(obj.get("b"))
        count = 1
        for d in shape:
            count *= d
        if raw.size != count * dtype.itemsize:
            self.fail(f"{raw.size} bytes for {shape} x {dtype}")
        return raw.view(dtype).reshape(shape)

    def dtype(self, name):
        try:
            dt = np.dtype(name)
        except (TypeError, ValueError):
            dt = None
        if dt is None or dt.kind not in _ND_KINDS or dt.fields is not None:
            self.fail(f"bad dtype {name!r}")
        return dt

    def value(self, x):
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, list):
            return [self.value(v) for v in x]
        if not isinstance(x, dict):
            self.fail(f"unexpected {type(x).__name__}")
        tag = x.get("T")
        if tag == "tuple":
            return tuple(self.value(v) for v in self.items(x, "v"))
        if tag in ("dict", "odict"):
            keys, values = self.items(x, "k"), self.items(x, "v")
            if len(keys) != len(values):
                self.fail("a dict with more keys than values")
            pairs = [(self.value(k), self.value(v)) for k, v in zip(keys, values)]
            try:
                out = dict(pairs) if tag == "dict" else collections.OrderedDict(pairs)
            except TypeError as e:
                self.fail(f"bad dict key: {e}")
            if tag == "odict" and "m" in x:
                out._metadata = self.value(x["m"])
            return out
        if tag == "complex":
            re_im = self.items(x, "v")
            if len(re_im) != 2 or not all(isinstance(v, (int, float)) for v in re_im):
                self.fail("bad complex")
            return complex(*re_im)
        if tag == "bytes":
            return self.blob(x.get("b")).tobytes()
        if tag == "nd":
            return self.array(x, self.dtype(x.get("dtype")), x.get("shape"))
        if tag == "np":
            return self.array(x, self.dtype(x.get("dtype")), [])[()]
        if tag == "tensor":
            return self.tensor(x)
        self.fail(f"unknown tag {tag!r}")

    def items(self, x, key):
        v = x.get(key)
        if not isinstance(v, list):
            self.fail(f"a {x.get('T')} without its {key!r} list")
        return v

    def tensor(self, x):
        name = x.get("dtype")
        if name not in _TENSOR_DTYPES:
            self.fail(f"bad tensor dtype {name!r}")
        if self.torch is None:
            import torch  # only a state that holds tensors needs torch

            self.torch = torch
        torch = self.torch
        arr = self.array(x, np.dtype(_TENSOR_DTYPES[name]), x.get("shape"))
        t = torch.from_numpy(arr)
        if name == "bfloat16":
            t = t.view(torch.bfloat16)
        if x.get("param"):
            return torch.nn.Parameter(t, requires_grad=bool(x.get("grad")))
        return t.requires_grad_(bool(x.get("grad"))) if t.is_floating_point() else t


def decode(data, what="checkpoint part"):
    """The state in data, a writable uint8 NumPy array holding a whole part
    (arrays and tensors of the state are views of it). what names the part
    in errors. Raises FormatError."""
    if data.size < HEADER_SIZE:
        raise FormatError(f"{what}: {data.size} bytes, shorter than the header")
    magic, version, _, length = _HEADER.unpack(data[:HEADER_SIZE].tobytes())
    if magic != MAGIC:
        raise FormatError(f"{what}: not a ringd checkpoint part")
    if version != VERSION:
        raise FormatError(f"{what}: format version {version}; this ringd reads {VERSION}")
    if length > data.size - HEADER_SIZE:
        raise FormatError(f"{what}: truncated in its description")
    try:
        doc = json.loads(data[HEADER_SIZE : HEADER_SIZE + length].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"{what}: damaged description: {e}") from None
    base = _align(HEADER_SIZE + length)
    blobs = doc.get("blobs") if isinstance(doc, dict) else None
    if not isinstance(blobs, list) or "state" not in doc:
        raise FormatError(f"{what}: damaged description")
    for b in blobs:
        if (
            not isinstance(b, list)
            or len(b) != 2
            or not all(isinstance(v, int) and v >= 0 for v in b)
            or base + b[0] + b[1] > data.size
        ):
            raise FormatError(f"{what}: a blob {b!r} outside the part ({data.size} bytes)")
    return _Decoder(data, base, blobs, what).value(doc["state"])
