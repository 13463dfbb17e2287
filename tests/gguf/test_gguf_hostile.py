"""Malformed GGUF files: every one must raise GGUFError naming the fault; never a crash, hang, huge
allocation or read past the end. Each case builds its own file byte by byte."""

import random
import struct

import numpy as np
import pytest

from fastgguf import GGUFError, GGUFFile, GGUFWriter
from fastgguf.gguf import GGUFValueType as V

U64_MAX = 2**64 - 1


def u32(x):
    return struct.pack("<I", x)


def u64(x):
    return struct.pack("<Q", x)


def i64(x):
    return struct.pack("<q", x)


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return u64(len(b)) + b


def kv(key, vtype, payload):
    return s(key) + u32(vtype) + payload


def kv_u32(key, v):
    return kv(key, V.UINT32, u32(v))


def ti(name, ne, ttype=0, offset=0, n_dims=None):
    nd = len(ne) if n_dims is None else n_dims
    return s(name) + u32(nd) + b"".join(i64(d) for d in ne) + u32(ttype) + u64(offset)


def gguf(kvs=(), tis=(), data=b"", version=3, n_kv=None, n_t=None, align=32, magic=b"GGUF", pad=True):
    head = magic + u32(version) + u64(len(tis) if n_t is None else n_t) + u64(len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tis)
    if pad:
        body += bytes(-len(body) % align)
    return body + data


F32x4 = ti("w", [4], 0, 0)
DATA16 = bytes(16)

# (id, file bytes, a fragment the error message must contain)
CASES = [
    ("empty", b"", "empty"),
    ("magic-only", b"GGUF", "version"),
    ("wrong-magic", b"GGML" + bytes(60), "magic"),
    ("lowercase-magic", b"gguf" + u32(3) + bytes(16), "magic"),
    ("version-0", gguf(version=0), "version 0"),
    ("version-1", gguf(version=1), "v1"),
    ("version-4", gguf(version=4), "version 4"),
    ("byteswapped-v3", b"GGUF" + struct.pack(">I", 3) + bytes(16), "big-endian"),
    ("byteswapped-v2", b"GGUF" + struct.pack(">I", 2) + bytes(16), "big-endian"),
    ("header-truncated", b"GGUF" + u32(3) + u64(0), "key count"),
    # counts
    ("kv-count-minus-1", gguf(n_kv=U64_MAX), "key count"),
    ("kv-count-2^63", gguf(n_kv=2**63), "key count"),
    ("tensor-count-minus-1", gguf(n_t=U64_MAX), "tensor count"),
    ("tensor-count-2^63", gguf(n_t=2**63), "tensor count"),
    ("kv-count-too-big", gguf([kv_u32("a", 1)], n_kv=2), "metadata key #1"),
    ("tensor-count-too-big", gguf([], [F32x4], bytes(200), n_t=3), "tensor #1"),
    ("tensor-count-too-big-eof", gguf([], [F32x4], DATA16, n_t=3), "tensor count"),
    # strings
    ("key-len-u64max", gguf([u64(U64_MAX) + bytes(64)], pad=False), "metadata key #0"),
    ("key-len-past-eof", gguf([u64(1000) + bytes(64)], pad=False), "metadata key #0"),
    ("key-empty", gguf([kv_u32("", 1)]), "empty key"),
    ("value-string-u64max", gguf([kv("s", V.STRING, u64(U64_MAX) + b"x")]), "'s'"),
    ("value-string-past-eof", gguf([kv("s", V.STRING, u64(500) + b"x")]), "'s'"),
    ("key-not-utf8", gguf([kv(b"k\xff", V.UINT8, b"\x01")]), "UTF-8"),
    # value types
    ("unknown-value-type", gguf([kv("k", 13, u32(0))]), "unknown value type 13"),
    ("unknown-value-type-huge", gguf([kv("k", 0xFFFFFFFF, u32(0))]), "unknown value type"),
    ("bool-value-2", gguf([kv("b", V.BOOL, b"\x02")]), "bool"),
    ("array-of-arrays", gguf([kv("a", V.ARRAY, u32(V.ARRAY) + u64(1) + u32(V.UINT8) + u64(1) + b"\x01")]),
     "arrays of arrays"),
    ("array-unknown-elem", gguf([kv("a", V.ARRAY, u32(77) + u64(1) + b"\x00")]), "element type 77"),
    ("array-count-u64max", gguf([kv("a", V.ARRAY, u32(V.UINT32) + u64(U64_MAX))]), "'a'"),
    ("array-bytes-overflow", gguf([kv("a", V.ARRAY, u32(V.UINT64) + u64(2**61 + 1) + bytes(8))]), "'a'"),
    ("array-count-past-eof", gguf([kv("a", V.ARRAY, u32(V.INT32) + u64(10) + bytes(8))]), "'a'"),
    ("string-array-count-huge", gguf([kv("a", V.ARRAY, u32(V.STRING) + u64(2**62) + s("x"))]), "'a'"),
    ("string-array-bad-len", gguf([kv("a", V.ARRAY, u32(V.STRING) + u64(2) + s("x") + u64(2**40) + b"y")]),
     "'a'"),
    ("string-array-short", gguf([kv("a", V.ARRAY, u32(V.STRING) + u64(3) + s("x") + s("y"))], pad=False), "'a'"),
    ("bool-array-bad", gguf([kv("a", V.ARRAY, u32(V.BOOL) + u64(2) + b"\x01\x05")]), "bool"),
    ("duplicate-key", gguf([kv_u32("k", 1), kv_u32("k", 2)]), "duplicate"),
    ("value-truncated", gguf([kv("k", V.UINT64, b"\x01\x02")], pad=False), "'k'"),
    # alignment
    ("alignment-wrong-type", gguf([kv("general.alignment", V.UINT64, u64(32))]), "general.alignment"),
    ("alignment-string", gguf([kv("general.alignment", V.STRING, s("32"))]), "general.alignment"),
    ("alignment-zero", gguf([kv_u32("general.alignment", 0)]), "general.alignment"),
    ("alignment-not-pow2", gguf([kv_u32("general.alignment", 48)]), "general.alignment"),
    ("alignment-huge", gguf([kv_u32("general.alignment", 2**31)]), "general.alignment"),
    # tensor descriptors
    ("name-64-bytes", gguf([], [ti("n" * 64, [4])], DATA16), "limit is 63"),
    ("name-len-u64max", gguf([], [u64(U64_MAX) + b"w"]), "tensor #0"),
    ("name-not-utf8", gguf([], [ti(b"w\xfe", [4])], DATA16), "UTF-8"),
    ("duplicate-tensor", gguf([], [ti("w", [4], 0, 0), ti("w", [4], 0, 32)], bytes(48)), "duplicate"),
    ("n-dims-0", gguf([], [ti("w", [], 0, 0)], DATA16), "n_dims is 0"),
    ("n-dims-5", gguf([], [ti("w", [1, 1, 1, 1, 4], 0, 0)], DATA16), "n_dims is 5"),
    ("n-dims-huge", gguf([], [ti("w", [4], 0, 0, n_dims=2**31)], DATA16), "n_dims"),
    ("negative-dim", gguf([], [ti("w", [4, -1], 0, 0)], DATA16), "negative dimension"),
    ("dim-minus-2^63", gguf([], [ti("w", [-(2**63)], 0, 0)], DATA16), "negative dimension"),
    ("elements-overflow", gguf([], [ti("w", [2**32, 2**32], 0, 0)], DATA16), "overflows"),
    ("elements-overflow-4d", gguf([], [ti("w", [2**16] * 4, 0, 0)], DATA16), "overflows"),
    ("bytes-overflow", gguf([], [ti("w", [2**62], 0, 0)], DATA16), "overflows"),
    ("unknown-type", gguf([], [ti("w", [4], 99, 0)], DATA16), "unknown ggml type id 99"),
    ("removed-type-q4_2", gguf([], [ti("w", [32], 4, 0)], bytes(32)), "removed type Q4_2"),
    ("removed-type-q4_3", gguf([], [ti("w", [32], 5, 0)], bytes(32)), "removed type Q4_3"),
    ("removed-type-q4_0_4_4", gguf([], [ti("w", [32], 31, 0)], bytes(32)), "removed type Q4_0_4_4"),
    ("removed-type-q4_0_8_8", gguf([], [ti("w", [32], 33, 0)], bytes(32)), "removed type"),
    ("removed-type-iq4_nl_4_4", gguf([], [ti("w", [32], 36, 0)], bytes(32)), "removed type"),
    ("not-block-multiple", gguf([], [ti("w", [48], 2, 0)], bytes(64)), "block size 32"),
    ("not-block-multiple-k", gguf([], [ti("w", [128, 2], 12, 0)], bytes(512)), "block size 256"),
    ("offset-unaligned", gguf([], [ti("w", [4], 0, 4)], bytes(48)), "not a multiple of the alignment"),
    ("offsets-overlap", gguf([], [ti("a", [16], 0, 0), ti("b", [4], 0, 32)], bytes(96)), "overlaps"),
    ("offsets-out-of-order", gguf([], [ti("a", [4], 0, 32), ti("b", [4], 0, 0)], bytes(64)), "overlaps"),
    ("offset-past-eof", gguf([], [ti("w", [4], 0, 2**40)], DATA16), "past the end"),
    ("offset-u64max", gguf([], [ti("w", [4], 0, U64_MAX - 31)], DATA16), "past the end"),
    ("data-one-byte-short", gguf([], [ti("w", [4], 0, 0)], bytes(15)), "past the end"),
    ("data-missing", gguf([], [ti("w", [4], 0, 0)], b""), "past the end"),
    ("second-tensor-short", gguf([], [ti("a", [4], 0, 0), ti("b", [8], 0, 32)], bytes(63)), "'b'"),
    ("descriptor-truncated", gguf([], [ti("w", [4], 0, 0)[:-3]], pad=False), "tensor #0"),
    ("padding-missing", gguf([kv_u32("k", 1)], [ti("w", [4], 0, 0)], pad=False), "past the end"),
]


@pytest.mark.parametrize("data,fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile(tmp_path, data, fragment):
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    with pytest.raises(GGUFError) as e:
        GGUFFile(p)
    assert fragment in str(e.value)


def test_the_builder_makes_valid_files(tmp_path):
    """The cases above differ from valid files only in their fault."""
    p = tmp_path / "ok.gguf"
    p.write_bytes(gguf([kv_u32("general.alignment", 64), kv("a", V.ARRAY, u32(V.STRING) + u64(2) + s("x") + s(""))],
                       [ti("a", [4], 0, 0), ti("b", [64], 3, 64), ti("z", [0, 3], 0, 128)],
                       bytes(128), align=64))
    with GGUFFile(p) as f:
        assert f.metadata["a"] == ["x", ""]
        assert f.tensors["b"].nbytes == 40
        assert f.tensors["z"].n_elements == 0 and f.tensor("z").shape == (3, 0)


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        GGUFFile(tmp_path / "nope.gguf")


def test_trailing_bytes_are_accepted(tmp_path):
    p = tmp_path / "t.gguf"
    p.write_bytes(gguf([], [F32x4], DATA16 + b"trailing junk"))
    with GGUFFile(p) as f:
        assert f.tensor("w").shape == (4,)


def test_metadata_only_file_without_padding(tmp_path):
    p = tmp_path / "vocab.gguf"
    p.write_bytes(gguf([kv_u32("k", 7)], pad=False))
    with GGUFFile(p) as f:
        assert f.metadata == {"k": 7} and f.tensors == {}


def test_v2_is_read(tmp_path):
    p = tmp_path / "v2.gguf"
    p.write_bytes(gguf([kv_u32("k", 7)], [F32x4], DATA16, version=2))
    with GGUFFile(p) as f:
        assert f.version == 2 and f.metadata["k"] == 7


def _small_valid_file(n_strings=3):
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_uint32("llama.block_count", 2)
    w.add_float32("f", 0.5)
    w.add_bool("b", True)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(n_strings)])
    w.add_array("tokenizer.ggml.scores", np.arange(n_strings, dtype=np.float32))
    w.add_tensor("a", np.ones((2, 4), np.float32))
    w.add_tensor("q", np.zeros((2, 40), np.uint8), ggml_type=3, shape=(2, 64))
    w.add_tensor("c", np.ones(3, np.float16))
    return w.tobytes()


def _data_offset(data, tmp_path):
    p = tmp_path / "valid.gguf"
    p.write_bytes(data)
    with GGUFFile(p) as f:
        return f.data_offset, max(t.offset + t.nbytes for t in f.tensors.values())


@pytest.mark.parametrize("n_strings", [3, 600])
def test_truncated_everywhere(tmp_path, n_strings):
    """Cut a valid file at every byte of its header, metadata and tensor infos, and in its data section."""
    data = _small_valid_file(n_strings)
    data_offset, data_end = _data_offset(data, tmp_path)
    cuts = list(range(0, data_offset + 1))
    if n_strings > 100:     # the big string array: every 13th byte plus the area after the array
        cuts = sorted(set(cuts[::13]) | set(range(data_offset - 300, data_offset + 1)))
    cuts += list(range(data_offset + 1, data_end, 7)) + [data_end - 1]
    p = tmp_path / "cut.gguf"
    for n in cuts:
        p.write_bytes(data[:n])
        try:
            GGUFFile(p).close()
        except GGUFError:
            continue
        # a cut right after the tensor infos can only parse if no tensor data was needed: never here
        pytest.fail(f"truncation at {n} of {len(data)} bytes parsed without error")
    p.write_bytes(data[:data_end])
    GGUFFile(p).close()          # exactly the bytes needed (the last tensor's padding cut off) is fine


def test_random_corruption_never_crashes(tmp_path):
    """Flip random bytes in the header area: either a clean GGUFError or a parse, nothing else."""
    data = _small_valid_file(700)
    data_offset, _ = _data_offset(data, tmp_path)
    rng = random.Random(1234)
    p = tmp_path / "fuzz.gguf"
    for _ in range(400):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(4, data_offset)
            b[i] = rng.choice([0, 1, 0xFF, 0x80, 0x7F, rng.randrange(256)])
        p.write_bytes(bytes(b))
        try:
            with GGUFFile(p) as f:
                for name in f.tensors:
                    f.tensor(name)
                dict(f.metadata)
        except GGUFError:
            pass
