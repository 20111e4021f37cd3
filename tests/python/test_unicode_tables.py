"""libcism/src/tokenizer/unicode_data.c is exactly what tools/gen_unicode_tables.py
produces (needs unicodedata2 16.0.0 and the UCD's DerivedAge.txt / PropList.txt,
which .ci/run installs: tests/requirements.txt and Debian's unicode-data)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tables_match_generator():
    ud2 = pytest.importorskip("unicodedata2")
    if ud2.unidata_version != "16.0.0":
        pytest.skip(f"unicodedata2 {ud2.unidata_version} installed; the tables need 16.0.0")
    for f in ("/usr/share/unicode/DerivedAge.txt", "/usr/share/unicode/PropList.txt"):
        if not os.path.exists(f):
            pytest.skip(f"{f} is missing (apt-get install unicode-data)")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_unicode_tables.py")], check=True,
                         capture_output=True).stdout
    with open(os.path.join(ROOT, "libcism", "src", "tokenizer", "unicode_data.c"), "rb") as f:
        assert f.read() == out, "unicode_data.c is stale: run tools/gen_unicode_tables.py"
