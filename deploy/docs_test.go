package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The repository's docs are its own: the external contract is
// docs/contract.md, the consumers' specs are docs/specs/<service>.md, and
// invariants are named by the specs' ids (MSG-n, BND-n, CRM-n). This test
// reads every tracked text file and fails on a reference that leads out of
// the repository or to nothing. It lives here, next to the other checks of
// what operators read, because it needs neither a database nor a broker.
//
// The patterns are spelt in pieces so that this file does not match them.
var (
	// Paths of the material the docs were written from, outside the
	// repository, and of the machine it was written on.
	outside = []string{".." + "/shared", "/" + "work/"}
	// The shared contract's file name (the repository's is lower-case).
	sharedContract = "CONTRACT" + ".md"
	// An invariant id of the original specs.
	originalInvariant = regexp.MustCompile(`\bINV` + `-[A-Z0-9]`)
	// A section of the contract cited from anywhere.
	contractCitation = regexp.MustCompile(`docs/contract\.md §(\d+(?:\.\d+)*)`)
	// A section cited inside the contract itself.
	bareCitation = regexp.MustCompile(`§(\d+(?:\.\d+)*)`)
	// A numbered heading of the contract: "## 4. Messages", "### 4.2 Names".
	sectionHeading = regexp.MustCompile(`(?m)^#{2,6}\s+(\d+(?:\.\d+)*)\.?\s`)
	// A spec cited by file name.
	specCitation = regexp.MustCompile(`\bspecs/([A-Za-z0-9_-]+)\.md\b`)
	// An invariant id of the repository's specs, and its definition there.
	invariantCitation   = regexp.MustCompile(`\b(?:MSG|BND|CRM)-\d+\b`)
	invariantDefinition = regexp.MustCompile(`\*\*((?:MSG|BND|CRM)-\d+) `)
)

// sizeLimits bound the entry pages a newcomer reads first, in bytes: the
// long material belongs in docs/ (operations.md, schema.md), linked from
// them.
var sizeLimits = map[string]int{
	"README.md": 12 * 1024,
	"DESIGN.md": 18 * 1024, // 15 KiB until the production edges (poolers, group protocols, DLQ sizes and partitions, byte budgets); 16 until the attempt loop and the table of what each part serves
}

// pendingShrink are files of sizeLimits being rewritten elsewhere: their
// limit is not checked yet. Remove an entry once its file is within it.
var pendingShrink = map[string]bool{}

func TestEntryPagesStayShort(t *testing.T) {
	for name, limit := range sizeLimits {
		fi, err := os.Stat(filepath.Join("..", name))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case pendingShrink[name]:
			t.Logf("%s: %d bytes, limit %d not checked yet (pendingShrink)", name, fi.Size(), limit)
		case fi.Size() > int64(limit):
			t.Errorf("%s is %d bytes, over its limit of %d: move the long material to docs/ and link it", name, fi.Size(), limit)
		}
	}
}

func TestDocsAreTheRepositorysOwn(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	contract := readFile(t, filepath.Join(root, "docs", "contract.md"))
	sections := map[string]bool{}
	for _, m := range sectionHeading.FindAllStringSubmatch(contract, -1) {
		sections[m[1]] = true
	}
	if len(sections) == 0 {
		t.Fatal("docs/contract.md has no numbered section")
	}
	invariants := map[string]bool{}
	specs, err := filepath.Glob(filepath.Join(root, "docs", "specs", "*.md"))
	if err != nil || len(specs) == 0 {
		t.Fatalf("no spec under docs/specs (%v)", err)
	}
	for _, p := range specs {
		for _, m := range invariantDefinition.FindAllStringSubmatch(readFile(t, p), -1) {
			invariants[m[1]] = true
		}
	}

	files := trackedFiles(t, root)
	if !slices.Contains(files, "docs/contract.md") {
		t.Fatalf("docs/contract.md is not among the %d files found", len(files))
	}
	for _, name := range files {
		text, ok := readText(t, filepath.Join(root, filepath.FromSlash(name)))
		if !ok {
			continue // binary
		}
		lines := strings.Split(text, "\n")
		for i, line := range lines {
			at := func(format string, args ...any) {
				t.Helper()
				t.Errorf("%s:%d: "+format, append([]any{name, i + 1}, args...)...)
			}
			for _, o := range outside {
				if strings.Contains(line, o) {
					at("refers to %s, outside the repository: cite docs/contract.md or docs/specs/<service>.md", o)
				}
			}
			if strings.Contains(line, sharedContract) {
				at("cites %s: the repository's contract is docs/contract.md", sharedContract)
			}
			if m := originalInvariant.FindString(line); m != "" {
				at("cites an invariant id of the original specs (%s…): use the ids of docs/specs/<service>.md", m)
			}
			for _, m := range contractCitation.FindAllStringSubmatch(line, -1) {
				if !sections[m[1]] {
					at("cites docs/contract.md §%s, which has no such section", m[1])
				}
			}
			if name == "docs/contract.md" {
				for _, m := range bareCitation.FindAllStringSubmatch(line, -1) {
					if !sections[m[1]] {
						at("cites §%s, which docs/contract.md does not have", m[1])
					}
				}
			}
			for _, m := range specCitation.FindAllStringSubmatch(line, -1) {
				if _, err := os.Stat(filepath.Join(root, "docs", "specs", m[1]+".md")); err != nil {
					at("cites specs/%s.md, which is not in docs/specs", m[1])
				}
			}
			for _, id := range invariantCitation.FindAllString(line, -1) {
				if !invariants[id] {
					at("cites the invariant %s, which no spec under docs/specs defines", id)
				}
			}
		}
	}
}

// trackedFiles lists the repository's tracked files (slash-separated,
// relative to root). Without git (a source tree without its history) it
// walks the tree instead, leaving out what .gitignore leaves out.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	// safe.directory: CI runs as root on a clone another user may own.
	out, err := exec.Command("git", "-c", "safe.directory=*", "-C", root, "ls-files", "-z").Output()
	if err == nil {
		var files []string
		for _, f := range bytes.Split(out, []byte{0}) {
			if len(f) > 0 {
				files = append(files, string(f))
			}
		}
		return files
	}
	t.Logf("git ls-files: %v; walking the tree instead", err)
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", ".data", "tmp":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".test") || strings.HasSuffix(rel, ".out") || strings.HasSuffix(rel, ".tmp") {
			return nil
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readText returns a file's text, or false for a binary file (a NUL byte
// in its first 8000 bytes, git's own test).
func readText(t *testing.T, path string) (string, bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) { // tracked, deleted in the working tree
			return "", false
		}
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 8000)
	n, _ := f.Read(head)
	if bytes.IndexByte(head[:n], 0) >= 0 {
		return "", false
	}
	return readFile(t, path), true
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
