package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/thawqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// admit reserves need (MiB per GPU UUID) for a thaw of rec's once every
// GPU has it free beyond the margin (thawqueue: in turn with the other
// thaws waiting), counting what the owner's fillers would hand over as
// free; they hand it over before admit returns. With wait 0 it answers at
// once; otherwise it waits up to wait for memory to free. The returned
// func releases the reservation.
func (d *Daemon) admit(ctx context.Context, what string, rec proctable.Record, need map[string]uint64, wait time.Duration) (func(), error) {
	release, err := d.thaws.Admit(ctx, thawRequest(rec, need), wait)
	var missing *thawqueue.Missing
	var noRoom *thawqueue.NoRoom
	switch {
	case errors.As(err, &missing):
		return nil, api.Errorf(api.CodeUnavailable, "%s", missing)
	case errors.As(err, &noRoom) && noRoom.Expired:
		return nil, api.Errorf(api.CodeTimeout, "%s: waited %v for GPU memory: %s", what, wait, noRoom.Why)
	case errors.As(err, &noRoom):
		return nil, api.Errorf(api.CodeResourceExhausted, "%s: %s (pass a timeout to wait for memory)", what, noRoom.Why)
	case err != nil:
		return nil, err
	}
	handedOver := d.handOver(context.WithoutCancel(ctx), rec.Owner.UID, need)
	return func() { handedOver(); release() }, nil
}

// thawRequest is a thaw of rec's needing need, as the thaw queue takes it.
func thawRequest(rec proctable.Record, need map[string]uint64) thawqueue.Request {
	return thawqueue.Request{UID: rec.Owner.UID, Owner: rec.Owner.User, Priority: rec.Policy.Priority, Need: need}
}

// thawGPUs is the latest GPU sample as the thaw queue reads it.
type thawGPUs struct {
	d  *Daemon
	gv *gpuView
}

func (d *Daemon) thawGPUs() thawqueue.GPUs { return thawGPUs{d: d, gv: d.gpuView()} }

func (g thawGPUs) Device(uuid string) (totalMiB, usedMiB uint64, index int, ok bool) {
	dev, ok := g.gv.device(uuid)
	return dev.TotalMiB, dev.UsedMiB, dev.Index, ok
}

func (g thawGPUs) Yield(uuid string, uid uint32) uint64 { return g.d.fillerYield(uuid, uid) }
