"""Average words per docstring sentence, per folder: how heavy the code reads.

    python scripts/docstring_words.py agentbake/buildkit agentbake/egress ...

A sentence ends at `.`, `!` or `?` before a space or the end; code spans and reST/markdown marks count as words.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> list[str]:
    """The docstring's sentences, its lines joined."""
    flat = " ".join(text.split())
    return [s for s in _SENTENCE_END.split(flat) if s.split()]


def docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return [doc for node in nodes if (doc := ast.get_docstring(node))]


def main(folders: list[str]) -> None:
    total_words = total_sentences = 0
    print(f"{'folder':<28} {'docstrings':>10} {'sentences':>9} {'words/sentence':>14}")
    for folder in folders:
        found = [s for path in sorted(Path(folder).rglob("*.py")) for doc in docstrings(path) for s in sentences(doc)]
        words = sum(len(s.split()) for s in found)
        count = sum(len(docstrings(path)) for path in Path(folder).rglob("*.py"))
        print(f"{folder:<28} {count:>10} {len(found):>9} {words / max(len(found), 1):>14.1f}")
        total_words, total_sentences = total_words + words, total_sentences + len(found)
    print(f"{'all':<28} {'':>10} {total_sentences:>9} {total_words / max(total_sentences, 1):>14.1f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["agentbake"])
