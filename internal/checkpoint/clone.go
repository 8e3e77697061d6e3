package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/fdinfo"
)

// filesImage lists every file a dumped tree has open.
const filesImage = "files.img"

// CloneImage makes dst (which must not exist) an image of the same tree as
// src whose regular files open at a path of reopen are reopened at the
// path it maps to: a fork gives each copy its own log. Everything else is
// hard-linked, so a clone costs no copy of the memory pages; the clone's
// sums are its own (writeSums).
func CloneImage(src, dst string, reopen map[string]string) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("clone image: %w", err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("clone image: %w", err)
	}
	for _, e := range ents {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch {
		case e.Name() == filesImage+dumpedMountsSuffix: // src's restore is staging its ghosts (stageGhosts)
			continue
		case e.Name() == filesImage:
			if _, err := os.Lstat(from + dumpedMountsSuffix); err == nil {
				from += dumpedMountsSuffix // as dumped
			}
			err = rewriteFiles(from, to, reopen)
		case e.Type()&os.ModeSymlink != 0:
			var target string
			if target, err = os.Readlink(from); err == nil {
				err = os.Symlink(target, to)
			}
		case e.Type().IsRegular():
			err = os.Link(from, to)
		}
		if err != nil {
			return fmt.Errorf("clone image %s: %w", e.Name(), err)
		}
	}
	return writeSums(dst)
}

// rewriteFiles copies a files image, renaming the regular files of reopen.
func rewriteFiles(from, to string, reopen map[string]string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	img, err := crit.New(in, nil, "", false, false).Decode(&fdinfo.FileEntry{})
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	for _, e := range img.Entries {
		fe, ok := e.Message.(*fdinfo.FileEntry)
		if !ok || fe.GetType() != fdinfo.FdTypes_REG || fe.Reg == nil {
			continue
		}
		name := fe.Reg.GetName()
		if n, ok := reopen["/"+strings.TrimPrefix(name, "/")]; ok {
			if !strings.HasPrefix(name, "/") {
				n = strings.TrimPrefix(n, "/")
			}
			fe.Reg.Name = &n
			fe.Reg.Size = nil // the new file starts empty
		}
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := crit.New(nil, out, "", false, false).Encode(img); err != nil {
		out.Close()
		return fmt.Errorf("encode: %w", err)
	}
	return out.Close()
}
