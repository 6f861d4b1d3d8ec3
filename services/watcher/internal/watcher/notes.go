package watcher

import "time"

// deleteNoteHorizon is how long a delete note is kept at least. A note is
// read by the first sync of its key after the delete event: in a term the
// event itself queues that sync; on a standby, the first term it starts (a
// takeover) syncs the key from KUBE's seed, where the old leader left the pod
// if it never stored its tombstone. A lease changes hands in seconds and a
// term's feed reaches the seed's keys within a minute at 150,000 pods, so
// 5 minutes covers a takeover many times over; a pod deleted earlier that
// still needs its note (its old leader could not publish for that long)
// counts as an unknown departure, the cautious reading (docs/watcher.md,
// "Departures").
const deleteNoteHorizon = 5 * time.Minute

// deleteNote is what a pod's delete event showed, for the sync that finds
// the pod gone: the uid of a pod whose final state the event carried (seen;
// a DeletedFinalStateUnknown tombstone does not, and its departure is
// unknown), and of a pod whose final state was being evicted through the
// Eviction API (evicted; a pod evicted and removed before its sync ran was
// never stored as evicting). "" for none.
type deleteNote struct{ seen, evicted string }

// deleteNotes keeps the delete notes by pod key, in two generations so that
// they are bounded without a timestamp per note: a note lives at least
// deleteNoteHorizon and is dropped at the second rotation after it was made.
// Every delete event makes a note, a standby's too, and a key is not reused
// by pods with generated names: without the bound a standby kept one note per
// pod ever deleted. Callers hold Watcher.mu.
type deleteNotes struct {
	cur, old map[string]deleteNote
	since    time.Time // when cur started
}

func newDeleteNotes(now time.Time) deleteNotes {
	return deleteNotes{cur: map[string]deleteNote{}, old: map[string]deleteNote{}, since: now}
}

// get returns the note of key (zero if none).
func (n *deleteNotes) get(key string) deleteNote {
	if d, ok := n.cur[key]; ok {
		return d
	}
	return n.old[key]
}

// add notes a delete event of pod uid under key: seen if it carried the final
// state, evicted if that state was being evicted. A note of an earlier delete
// of the same key keeps what this one does not replace.
func (n *deleteNotes) add(key, uid string, seen, evicted bool, now time.Time) {
	n.rotate(now)
	d := n.get(key)
	if seen {
		d.seen = uid
	}
	if evicted {
		d.evicted = uid
	}
	delete(n.old, key)
	n.cur[key] = d
}

// rotate starts a new generation once the current one is deleteNoteHorizon
// old, dropping the previous one: its notes are at least that old.
func (n *deleteNotes) rotate(now time.Time) {
	if now.Sub(n.since) < deleteNoteHorizon {
		return
	}
	n.old, n.cur, n.since = n.cur, map[string]deleteNote{}, now
}

// forget drops the note of key.
func (n *deleteNotes) forget(key string) {
	delete(n.cur, key)
	delete(n.old, key)
}

// settled drops what the note of key says about pod uid, whose tombstone is
// stored; a note of a later pod of the same name stays.
func (n *deleteNotes) settled(key, uid string) {
	for _, m := range []map[string]deleteNote{n.cur, n.old} {
		d, ok := m[key]
		if !ok {
			continue
		}
		if d.seen == uid {
			d.seen = ""
		}
		if d.evicted == uid {
			d.evicted = ""
		}
		if d == (deleteNote{}) {
			delete(m, key)
		} else {
			m[key] = d
		}
	}
}

// keepSeeded keeps only the notes a term starting from seed can read: those
// of a pod KUBE holds alive with the note's uid. Every other pod's first sync
// either finds no record to compare the note with or a record of another pod.
func (n *deleteNotes) keepSeeded(seed map[string]record) {
	for _, m := range []map[string]deleteNote{n.cur, n.old} {
		for k, d := range m {
			if uid := seed[k].uid; uid == "" || (d.seen != uid && d.evicted != uid) {
				delete(m, k)
			}
		}
	}
}

func (n *deleteNotes) len() int { return len(n.cur) + len(n.old) }
