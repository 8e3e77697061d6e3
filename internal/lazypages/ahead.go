package lazypages

import "fmt"

// ahead is what the server loads as it starts, before the restore
// connects: the image of each process pstree.img lists, so that the
// background reads start while CRIU is still restoring (the restore
// connects only as it starts restoring the tree, prepare_lazy_pages_socket
// in criu/cr-restore.c, and hands a process over once its mappings are
// set up, setup_uffd in criu/uffd.c).
type ahead struct {
	done   chan struct{} // closed once loaded
	err    error         // pstree.img could not be read: nothing is loaded ahead
	order  []*taskImage  // the images loaded, in pstree.img's order
	images map[int]*taskImage
	errs   map[int]error // why a process's image could not be loaded
}

// loadAhead loads the images of dir's processes; a process whose image is
// bad is refused only when the restore hands it over, as it would be
// without this (a zombie has no memory images and is never handed over).
func loadAhead(dir string) *ahead {
	a := &ahead{done: make(chan struct{}), images: map[int]*taskImage{}, errs: map[int]error{}}
	go func() {
		defer close(a.done)
		pids, err := readPstree(dir)
		if err != nil {
			a.err = fmt.Errorf("no read-ahead: %w", err)
			return
		}
		for _, pid := range pids {
			img, err := loadTask(dir, pid)
			if err != nil {
				a.errs[pid] = err
				continue
			}
			a.images[pid] = img
			a.order = append(a.order, img)
		}
	}()
	return a
}

// take returns the image of the process with image id pid as loaded
// ahead, or ok false when it was not.
func (a *ahead) take(pid int) (img *taskImage, ok bool, err error) {
	<-a.done
	if err, ok := a.errs[pid]; ok {
		return nil, true, err
	}
	img, ok = a.images[pid]
	return img, ok, nil
}

// has reports whether img was loaded ahead.
func (a *ahead) has(img *taskImage) bool {
	<-a.done
	return a.images[img.id] == img
}
