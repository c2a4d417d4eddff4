package h2conn

import (
	"testing"

	"github.com/leangrpc/leangrpc/internal/hpack"
)

// holding returns it with Hold set when hold.
func holding(it SendItem, hold bool) SendItem {
	it.Hold = hold
	return it
}

// handedOver returns it with ReturnHandedOver.
func handedOver(it SendItem) SendItem {
	it.Return = ReturnHandedOver
	return it
}

// The send slot's moves are exactly the diagram's (sendslot.go): every
// pair of state and event is tried, the listed ones lead where listed and
// every other leaves the state as it was and says so.
func TestSlotTransitions(t *testing.T) {
	type move struct {
		from slotState
		ev   slotEvent
	}
	legal := map[move]slotState{
		{slotEmpty, evQueue}:       slotQueued,
		{slotQueued, evDetach}:     slotDetached,
		{slotDetached, evAttach}:   slotQueued,
		{slotDetached, evOrphan}:   slotOrphan,
		{slotQueued, evComplete}:   slotDone,
		{slotDetached, evComplete}: slotDone,
		{slotOrphan, evComplete}:   slotEmpty,
		{slotDone, evCollect}:      slotEmpty,
	}
	for from := range numSlotStates {
		for ev := range numSlotEvents {
			to, ok := from.on(ev)
			want, legalMove := legal[move{from, ev}]
			switch {
			case legalMove && (!ok || to != want):
				t.Errorf("%v on %v: %v, %v; want %v", ev, from, to, ok, want)
			case !legalMove && (ok || to != from):
				t.Errorf("%v on %v: %v, %v; want refused, state kept", ev, from, to, ok)
			}
		}
	}
}

// The slot's methods walk an item through its life: queue sets the first
// part and marks an ending item; detach copies the fields still to be
// encoded into the stream's own memory; a DATA item joins detached
// HEADERS; complete drops what is left and collect hands over the outcome.
func TestSlotLifecycle(t *testing.T) {
	var sl sendSlot
	hdrs := []hpack.HeaderField{{Name: ":status", Value: "200"}}
	trls := []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}
	sl.queue(SendItem{Parts: PartHeaders | PartData | PartTrailers, Headers: hdrs, Trailers: trls})
	if sl.state != slotQueued || sl.phase != PartHeaders || !sl.ended {
		t.Fatalf("after queue: %v, phase %v, ended %v", sl.state, sl.phase, sl.ended)
	}
	if next := sl.nextPart(); next != PartData {
		t.Fatalf("the part after the headers is %v, want data", next)
	}
	sl.detach()
	hdrs[0].Value, trls[0].Value = "x", "x" // the sender's memory is its own again
	if sl.state != slotDetached || sl.item.Headers[0].Value != "200" || sl.item.Trailers[0].Value != "0" {
		t.Fatalf("after detach: %v, fields %v %v", sl.state, sl.item.Headers, sl.item.Trailers)
	}
	if cap(sl.item.Headers) != 1 || cap(sl.item.Trailers) != 1 {
		t.Fatal("the copied fields may grow into each other")
	}
	sl.phase = PartData
	if next := sl.nextPart(); next != PartTrailers {
		t.Fatalf("the part after the data is %v, want trailers", next)
	}
	sl.complete(nil)
	if sl.state != slotDone || sl.phase != 0 || sl.item.Headers != nil {
		t.Fatalf("after complete: %v, phase %v", sl.state, sl.phase)
	}
	if err := sl.collect(); err != nil || sl.state != slotEmpty {
		t.Fatalf("collect: %v, %v", err, sl.state)
	}

	// A unary request: detached HEADERS, then the message joins them.
	sl = sendSlot{}
	sl.queue(SendItem{Parts: PartHeaders, Headers: hdrs, Hold: true, Return: ReturnHandedOver})
	sl.detach()
	if !sl.joinable() {
		t.Fatal("detached HEADERS not yet encoded do not take their message")
	}
	sl.join(DataItem(nil, true))
	if sl.item.Parts != PartHeaders|PartData || !sl.item.End || !sl.ended || sl.joinable() {
		t.Fatalf("after join: parts %v, end %v, ended %v", sl.item.Parts, sl.item.End, sl.ended)
	}
	sl.attach()
	if sl.state != slotQueued || sl.item.Return != ReturnEncoded {
		t.Fatalf("after attach: %v, return %v", sl.state, sl.item.Return)
	}
}
