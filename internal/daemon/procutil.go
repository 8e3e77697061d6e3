package daemon

import "github.com/gpusched/gpusched/internal/proctable"

// busy reports whether record id's processes kept GPU uuid busy in the
// view: by their own utilization where the backend tells each process's
// apart, otherwise (or where id holds nothing there) by the whole GPU's,
// anyone's work counting as theirs.
func (v *gpuView) busy(id, uuid string) bool {
	if u, ok := v.ownUtil(id, uuid); ok {
		return u > 0
	}
	for _, dv := range v.devices {
		if dv.UUID == uuid && dv.UtilPercent != nil && *dv.UtilPercent > 0 {
			return true
		}
	}
	return false
}

// ownUtil is how busy record id's processes kept GPU uuid, the sum of
// their own figures (at most 100), and whether the view tells: id holds
// memory there and each of its processes there has a figure.
func (v *gpuView) ownUtil(id, uuid string) (int, bool) {
	u, ok := v.util[id][uuid]
	return u, ok && u >= 0
}

// ownUtilOf is ownUtil of live record r for an answer: nil where the view
// does not tell.
func (v *gpuView) ownUtilOf(r proctable.Record, uuid string) *int {
	if u, ok := v.ownUtil(r.ID, uuid); ok && r.Live() {
		return &u
	}
	return nil
}
