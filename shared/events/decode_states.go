package events

import "strconv"

// int reads an int field.
func (d *decoder) int(dst *int) bool {
	v, ok := d.integer(strconv.IntSize)
	*dst = int(v)
	return ok
}

// The fast decoders of each state (decode.go has the machinery). Each key
// list is in the order of the type's fields, the order encoding/json writes
// them, and each case number is its index in that list.

var podFields = newFields("op", "uid", "namespace", "name", "resourceVersion", "nodeName", "phase", "reason",
	"message", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers", "owner",
	"containers", "failedAt", "pvc", "jobTracking", "labels", "disruptionReason")

func (d *decoder) pod(p *PodState) bool {
	return d.object(podFields, func(idx int) bool {
		var ok bool
		var s string
		switch idx {
		case 0:
			s, ok = d.str(true)
			p.Op = Op(s)
		case 1:
			ok = d.ownStr(&p.UID)
		case 2:
			p.Namespace, ok = d.str(true)
		case 3:
			ok = d.ownStr(&p.Name)
		case 4:
			ok = d.ownStr(&p.ResourceVersion)
		case 5:
			p.NodeName, ok = d.str(true)
		case 6:
			p.Phase, ok = d.str(true)
		case 7:
			p.Reason, ok = d.str(true)
		case 8:
			ok = d.ownStr(&p.Message)
		case 9:
			ok = d.timestamp(&p.CreationTimestamp)
		case 10:
			p.DeletionTimestamp, ok = d.timePtr()
		case 11:
			var v int64
			v, ok = d.integer(64)
			p.DeletionGracePeriodSeconds = &v
		case 12:
			ok = d.int(&p.Finalizers)
		case 13:
			var o Owner
			if ok = d.owner(&o); ok {
				p.Owner = d.in.owner(o)
			}
		case 14:
			d.sawContainers = true
			ok = d.array(func() bool {
				p.Containers = append(p.Containers, Container{})
				return d.container(&p.Containers[len(p.Containers)-1])
			})
		case 15:
			p.FailedAt, ok = d.timePtr()
		case 16:
			p.Storage, ok = d.boolean()
		case 17:
			p.JobTracking, ok = d.boolean()
		case 18:
			p.Labels, ok = d.stringMap()
		case 19:
			p.DisruptionReason, ok = d.str(true)
		}
		return ok
	})
}

var ownerFields = newFields("kind", "name")

func (d *decoder) owner(o *Owner) bool {
	return d.object(ownerFields, func(idx int) bool {
		var ok bool
		switch idx {
		case 0:
			o.Kind, ok = d.str(true)
		case 1:
			o.Name, ok = d.str(true)
		}
		return ok
	})
}

var containerFields = newFields("name", "kind", "lastReason", "restarts", "lastExitCode", "lastFinished")

func (d *decoder) container(c *Container) bool {
	return d.object(containerFields, func(idx int) bool {
		var ok bool
		var v int64
		switch idx {
		case 0:
			c.Name, ok = d.str(true)
		case 1:
			c.Kind, ok = d.str(true)
		case 2:
			c.LastReason, ok = d.str(true)
		case 3:
			v, ok = d.integer(32)
			c.Restarts = int32(v)
		case 4:
			v, ok = d.integer(32)
			c.LastExitCode = int32(v)
		case 5:
			c.LastFinished, ok = d.timePtr()
		}
		return ok
	})
}

var nodeFields = newFields("op", "uid", "name", "resourceVersion", "labels", "annotations", "unschedulable",
	"taints", "ready", "readySince", "allocatablePods", "ephemeralStorageBytes", "pods", "evicting", "departed",
	"departedEvicted", "departedUnknown", "evictionStreak", "podsResourceVersion", "imageBytes", "imageCount",
	"imagesTruncated")

func (d *decoder) node(n *NodeState) bool {
	return d.object(nodeFields, func(idx int) bool {
		var ok bool
		var s string
		switch idx {
		case 0:
			s, ok = d.str(true)
			n.Op = Op(s)
		case 1:
			n.UID, ok = d.str(false)
		case 2:
			n.Name, ok = d.str(true) // pods name their node: one copy for all
		case 3:
			n.ResourceVersion, ok = d.str(false)
		case 4:
			n.Labels, ok = d.stringMap()
		case 5:
			n.Annotations, ok = d.stringMap()
		case 6:
			n.Unschedulable, ok = d.boolean()
		case 7:
			n.Taints = []Taint{}
			ok = d.array(func() bool {
				n.Taints = append(n.Taints, Taint{})
				return d.taint(&n.Taints[len(n.Taints)-1])
			})
		case 8:
			n.Ready, ok = d.str(true)
		case 9:
			n.ReadySince, ok = d.timePtr()
		case 10:
			n.AllocatablePods, ok = d.integer(64)
		case 11:
			n.EphemeralBytes, ok = d.integer(64)
		case 12:
			ok = d.int(&n.Pods)
		case 13:
			ok = d.int(&n.Evicting)
		case 14:
			ok = d.int(&n.Departed)
		case 15:
			ok = d.int(&n.DepartedEvicted)
		case 16:
			ok = d.int(&n.DepartedUnknown)
		case 17:
			ok = d.int(&n.EvictionStreak)
		case 18:
			n.PodsResourceVersion, ok = d.str(false)
		case 19:
			n.ImageBytes, ok = d.integer(64)
		case 20:
			ok = d.int(&n.ImageCount)
		case 21:
			n.ImagesTruncated, ok = d.boolean()
		}
		return ok
	})
}

var taintFields = newFields("key", "value", "effect")

func (d *decoder) taint(t *Taint) bool {
	return d.object(taintFields, func(idx int) bool {
		var ok bool
		switch idx {
		case 0:
			t.Key, ok = d.str(true)
		case 1:
			t.Value, ok = d.str(true)
		case 2:
			t.Effect, ok = d.str(true)
		}
		return ok
	})
}
