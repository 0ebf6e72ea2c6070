# SPDX-License-Identifier: MIT
"""put() and publish() with if_version: the publish's condition
(TD_PUBLISH_IF, docs/protocol.md §6.3, "A publish with a condition"),
checked by the daemon where it commits: if_version=0 publishes only a
name that has no version, if_version=V only while V is current."""
import errno

import numpy as np
import pytest
import tensord


def test_put_with_if_version_0_creates_and_never_replaces(daemon, client):
    v1 = client.put("if/a", np.full(8, 1, np.uint8), if_version=0)
    assert v1 > 0
    with pytest.raises(tensord.Error) as e:
        client.put("if/a", np.full(8, 2, np.uint8), if_version=0)
    assert e.value.errno == errno.EEXIST
    assert "not replaced" in str(e.value)
    del e
    t = client.get("if/a")
    assert t.version == v1 and t.tolist() == [1] * 8
    del t


def test_put_with_if_version_replaces_only_that_version(daemon, client):
    v1 = client.put("if/b", np.full(4, 1, np.uint8))
    v2 = client.put("if/b", np.full(4, 2, np.uint8), if_version=v1)
    assert v2 > v1
    # v1 is no longer current: refused, v2 kept
    with pytest.raises(tensord.Error) as e:
        client.put("if/b", np.full(4, 3, np.uint8), if_version=v1)
    assert e.value.errno == errno.ESTALE
    del e
    t = client.get("if/b")
    assert t.version == v2 and t.tolist() == [2] * 4
    del t
    # a name with no version and a version expected
    with pytest.raises(tensord.Error) as e:
        client.put("if/none", np.zeros(4, np.uint8), if_version=v2)
    assert e.value.errno == errno.ESTALE
    del e


def test_publish_of_a_loan_with_if_version(daemon, client):
    a = client.alloc("if/c", (16,), "u8")
    a[:] = 7
    v1 = client.publish(a, if_version=0)
    del a
    b = client.alloc("if/c", (16,), "u8")
    b[:] = 9
    with pytest.raises(tensord.Error) as e:
        client.publish(b, if_version=0)
    assert e.value.errno == errno.EEXIST
    del e, b
    t = client.get("if/c")
    assert t.version == v1 and t.tolist() == [7] * 16
    del t


def test_if_version_is_checked_before_anything_is_sent(daemon, client):
    with pytest.raises(TypeError):
        client.put("if/d", np.zeros(4, np.uint8), if_version="1")
    with pytest.raises(ValueError):
        client.put("if/d", np.zeros(4, np.uint8), if_version=-1)
    with pytest.raises(tensord.NotFound):
        client.get("if/d")


def test_if_version_takes_a_numpy_integer_as_every_version_argument(
        daemon, client):
    """A version kept in a numpy array (an np.uint64, np.int64: no int)
    is taken as get(version=) takes it; if_version refused it with
    TypeError, and a float stays refused."""
    v1 = client.put("if/np", np.full(4, 1, np.uint8))
    versions = np.array([v1], np.uint64)
    v2 = client.put("if/np", np.full(4, 2, np.uint8),
                    if_version=versions[0])
    a = client.alloc("if/np", (4,), "u8")
    a[:] = 3
    v3 = client.publish(a, if_version=np.int64(v2))
    assert v1 < v2 < v3
    t = client.get("if/np", version=np.uint64(v3))
    assert t.version == v3 and t.tolist() == [3] * 4
    del t
    with pytest.raises(TypeError):
        client.put("if/np", np.zeros(4, np.uint8), if_version=float(v3))
    with pytest.raises(ValueError):
        client.put("if/np", np.zeros(4, np.uint8), if_version=np.int64(-1))
    assert client.stat("if/np").version == v3
