"""A first build in a cargo target directory starts from the plain release build's dependencies
(executors/native/adapter.py, seed_dependencies): copied whole, the crate's own artifacts left out,
never over a build already there."""

from __future__ import annotations

from pathlib import Path

from executors.native.adapter import seed_dependencies


def _release(root: Path) -> Path:
    release = root / "release"
    for name in ("deps/libbitflags-1a.rlib", "deps/libemq_native-2b.so", "build/bindgen-3c/out/bindings.rs",
                 ".fingerprint/bitflags-1a/lib-bitflags", ".fingerprint/emq-native-2b/lib-emq_native"):  # fmt: skip
        (release / name).parent.mkdir(parents=True, exist_ok=True)
        (release / name).write_text(name)
    return release


def test_a_new_target_gets_the_dependencies_and_not_the_crate(tmp_path: Path) -> None:
    release, target = _release(tmp_path / "plain"), tmp_path / "coverage"
    assert seed_dependencies(target, release)
    copied = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert copied == ["release/.fingerprint/bitflags-1a/lib-bitflags", "release/build/bindgen-3c/out/bindings.rs",
                      "release/deps/libbitflags-1a.rlib"]  # fmt: skip
    # a copy, not a link: cargo rewriting a fingerprint here leaves the plain build's alone
    (target / "release/.fingerprint/bitflags-1a/lib-bitflags").write_text("rewritten")
    assert (release / ".fingerprint/bitflags-1a/lib-bitflags").read_text() == ".fingerprint/bitflags-1a/lib-bitflags"


def test_a_target_with_a_build_or_no_plain_build_is_left_alone(tmp_path: Path) -> None:
    release, target = _release(tmp_path / "plain"), tmp_path / "coverage"
    (target / "release" / "deps").mkdir(parents=True)
    assert not seed_dependencies(target, release)
    assert not any((target / "release" / "deps").iterdir())
    assert not seed_dependencies(tmp_path / "other", tmp_path / "no-plain-build")
    assert not (tmp_path / "other").exists()
