"""Small rooms (issue 24 §1: "files ≲ 400 lines, functions ≲ 80"; docs/architecture.md,
Conventions): every module of src/llmpar within 450 lines, every function within 80."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "llmpar"
MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80


def test_modules_within_the_line_limit():
    big = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert big == {}, f"modules over {MAX_FILE_LINES} lines (split them by subject): {big}"


def test_functions_within_the_line_limit():
    big = []
    for p in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    big.append(f"{p.relative_to(SRC)}:{node.lineno} {node.name} ({n} lines)")
    assert big == [], f"functions over {MAX_FUNCTION_LINES} lines: {big}"


def test_the_size_check_can_fail():
    tree = ast.parse("def f():\n" + "    x = 1\n" * 90)
    fn = tree.body[0]
    assert fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES
