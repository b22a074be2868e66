"""Where images and templates come from: a user catalog folder over the built-in one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbake.buildkit.spec_files import SPEC_FILE, merge, read_toml
from agentbake.errors import SpecError

# The spec models (pydantic) load with the first spec validated: finding the catalog does without them.
if TYPE_CHECKING:
    from agentbake.buildkit.spec import ImageSpec

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def builtin_root() -> Path:
    """The folder holding the built-in `images/` and `templates/`: the checkout, or the wheel's copy."""
    checkout = _PACKAGE_DIR.parent
    if (checkout / "images").is_dir() and (checkout / "templates").is_dir():
        return checkout
    return _PACKAGE_DIR / "_catalog"


@dataclass(frozen=True)
class Catalog:
    """Image folders searched in order: the first one holding a name wins."""

    dirs: tuple[Path, ...]
    templates_dir: Path

    @classmethod
    def discover(cls, user_dir: Path | None = None) -> Catalog:
        """`user_dir` (from --catalog), else ./images when present, then the built-in catalog."""
        root = builtin_root()
        builtin = (root / "images").resolve()
        if user_dir is not None and not user_dir.is_dir():
            raise SpecError(f"--catalog {user_dir}: no such folder; pass a folder of <name>/{SPEC_FILE}")
        chosen = user_dir if user_dir is not None else (Path("images") if Path("images").is_dir() else None)
        dirs = [builtin] if chosen is None or chosen.resolve() == builtin else [chosen.resolve(), builtin]
        return cls(dirs=tuple(dirs), templates_dir=root / "templates")

    def names(self) -> list[str]:
        found = {p.parent.name for d in self.dirs for p in d.glob(f"*/{SPEC_FILE}")}
        return sorted(found)

    def load(self, name: str) -> ImageSpec:
        """Load and validate one spec, resolving `extends` chains."""
        from agentbake.buildkit.spec import validate_spec

        data, path = self._raw(name, start=0, chain=(), referrer=None)
        return validate_spec(data, name=name, source=path)

    def load_all(self) -> list[ImageSpec]:
        return [self.load(name) for name in self.names()]

    def _raw(self, name: str, start: int, chain: tuple[str, ...], referrer: Path | None) -> tuple[dict[str, Any], Path]:
        for index in range(start, len(self.dirs)):
            path = self.dirs[index] / name / SPEC_FILE
            if path.is_file():
                break
        else:
            known = ", ".join(self.names()) or "none"
            where = f"{referrer}: 'extends'" if referrer else "catalog"
            raise SpecError(f"{where}: no image named {name!r}; known images: {known}")
        data = read_toml(path)
        parent = data.pop("extends", None)
        if parent is None:
            return data, path
        if not isinstance(parent, str):
            raise SpecError(f"{path}: key 'extends' must be an image name (a string), got {parent!r}")
        if (parent in chain and parent != name) or (parent == name and index + 1 >= len(self.dirs)):
            cycle = " -> ".join((*chain, name, parent))
            raise SpecError(f"{path}: 'extends' forms a cycle ({cycle}); remove one link")
        # A spec extending its own name means the same image in a later (e.g. built-in) catalog.
        parent_start = index + 1 if parent == name else 0
        parent_data, _ = self._raw(parent, parent_start, (*chain, name), referrer=path)
        return merge(parent_data, data), path
