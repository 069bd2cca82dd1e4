"""docs/development.md's module list is generated from the module docstrings and must not go stale."""

from __future__ import annotations

import pytest

from oar.experiment import layout_docs

pytestmark = pytest.mark.quick


def test_committed_list_matches_the_docstrings():
    assert not layout_docs.undocumented(layout_docs.ROOT / "oar"), "a module has no docstring: write one"
    page = layout_docs.PAGE.read_text(encoding="utf-8")
    expected = layout_docs.update(page, layout_docs.render(layout_docs.ROOT / "oar"))
    assert page == expected, "docs/development.md's layout is stale: run `make docs` and commit the page"


def test_a_new_module_reaches_the_list_and_the_text_around_it_stays(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "sub" / "__init__.py").write_text('"""A subpackage, e.g. this one. Not this sentence."""\n')
    (package / "sub" / "tool.py").write_text('"""Does one thing\nwell. And more."""\n\nX = 1\n')
    page = "# Title\n\nabove\n\n" + layout_docs.BEGIN + "\nold list\n" + layout_docs.END + "\n\nbelow\n"
    updated = layout_docs.update(page, layout_docs.render(package))
    assert updated.startswith("# Title\n\nabove\n\n" + layout_docs.BEGIN) and updated.endswith(
        layout_docs.END + "\n\nbelow\n")
    assert "old list" not in updated
    assert "**`pkg/sub/`**: A subpackage, e.g. this one.\n\n- `tool.py`: Does one thing well.\n" in updated


def test_a_module_without_a_docstring_is_refused(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "bare.py").write_text("X = 1\n")
    assert layout_docs.undocumented(package) == ["pkg/bare.py"]
    with pytest.raises(ValueError, match="pkg/bare.py"):
        layout_docs.render(package)


def test_a_page_without_the_markers_is_refused():
    with pytest.raises(ValueError, match="markers"):
        layout_docs.update("# no markers here\n", "list")
