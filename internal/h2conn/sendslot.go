package h2conn

import (
	"fmt"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// The send side of a stream: one entry point, Stream.Send, hands the
// connection's writer one SendItem at a time through the stream's send
// slot. The slot holds at most one item; who waits for it is the slot's
// state:
//
//	              queue                      complete
//	  empty ─────────────────▶ queued ─────────────────────▶ done
//	    ▲                      │    ▲                          │
//	    │               detach │    │ attach                   │ collect
//	    │                      ▼    │                          │
//	    │                     detached ───── complete ────────▶│
//	    │                      │                               │
//	    │               orphan │                               ▼
//	    │                      ▼                             empty
//	    └──── complete ────── orphan
//
//	empty     no item.
//	queued    an item whose sender waits in Send (or writes it: flat
//	          combining, writesched.go), or a Release that waits for it.
//	detached  an item whose sender returned (ReturnHandedOver,
//	          ReturnHeadersOut); the stream's next Send or its Release
//	          attaches to it and waits.
//	orphan    a detached item that ends the stream, left by Release to the
//	          writer, which recycles the stream once it is out.
//	done      the item is out or failed; its outcome (result) waits for the
//	          sender, or, for a detached item, for the next Send or Release.
//
// A stream that fails (reset, connection end) drops its item: the same
// move as complete, with the failure as outcome, so that no closed stream
// keeps an item. Every move is one event of slotState.on; sendSlot.to
// applies it and refuses any other (a bug: under the leangrpcdebug tag it
// panics).
//
// Who may touch the slot: everything in it is guarded by conn.mu.

// Parts says which frames a SendItem carries; they go on the wire in the
// order of the constants.
type Parts uint8

const (
	// PartHeaders: HEADERS (and CONTINUATION) with SendItem.Headers. The
	// stream's first item has them; a later one only as trailers (End set,
	// no other part).
	PartHeaders Parts = 1 << iota
	// PartData: DATA frames with SendItem.Data (nil: one empty frame, or
	// none when trailers follow), split by the peer's frame size and the
	// flow-control windows.
	PartData
	// PartTrailers: HEADERS with SendItem.Trailers, ending the stream.
	PartTrailers
)

// ReturnPolicy says when Send may return before its item is encoded. An
// item that Send left behind (detached) goes out without its sender; the
// stream's next Send, or its Release, waits for it first and reports its
// failure.
type ReturnPolicy uint8

const (
	// ReturnEncoded: Send returns once the whole item is encoded, or the
	// stream failed.
	ReturnEncoded ReturnPolicy = iota
	// ReturnHandedOver: Send returns at once when another goroutine holds
	// the write role and the windows admit all of the item's DATA: that
	// goroutine encodes the item, from the stream's own copies of its
	// fields. So many streams sending through one writer do not park and
	// wake once per message. Otherwise as ReturnEncoded.
	ReturnHandedOver
	// ReturnHeadersOut: Send returns once nothing but the flow-control
	// windows holds the item back and its borrowed fields are encoded (its
	// HEADERS went out, it has no trailers); otherwise as ReturnEncoded. A
	// caller that holds a lock of its own while it sends then does not
	// keep it for as long as the peer withholds window.
	ReturnHeadersOut
)

// SendItem is what a stream sends in one Send: headers, data, trailers,
// whichever Parts names, in that order.
type SendItem struct {
	Headers  []hpack.HeaderField // borrowed until Send returns
	Trailers []hpack.HeaderField // borrowed until Send returns
	// Data is owned by the item: Send takes ownership, and frees it when
	// the send is refused or fails.
	Data  *bufpool.Buffer
	Parts Parts
	// End sets END_STREAM on the item's last frame; an item with
	// PartTrailers always ends the stream.
	End bool
	// Hold lets the item's frames wait unflushed for the stream's next
	// item when nothing else waits to be written and the caller writes
	// them itself: it sends again at once (a message, then the trailers),
	// and both leave in one system call. Any later writer flushes them, and
	// so does a send that is refused. An item that ends the stream is
	// never held.
	Hold   bool
	Return ReturnPolicy
}

// HeadersItem is HEADERS with fields, ending the stream when end. On a
// server a second one is the trailers, and must end the stream.
func HeadersItem(fields []hpack.HeaderField, end bool) SendItem {
	return SendItem{Parts: PartHeaders, Headers: fields, End: end}
}

// TrailersItem is the trailers that end the stream: HEADERS with fields
// and END_STREAM (on a server with no headers sent, a Trailers-Only
// response).
func TrailersItem(fields []hpack.HeaderField) SendItem { return HeadersItem(fields, true) }

// DataItem is b's bytes as DATA, ending the stream when end; nil b is one
// empty frame (DataItem(nil, true) half-closes). It takes ownership of b.
// It returns early when another goroutine writes (ReturnHandedOver).
func DataItem(b *bufpool.Buffer, end bool) SendItem {
	return SendItem{Parts: PartData, Data: b, End: end, Return: ReturnHandedOver}
}

// HeadersDataItem is a server's response headers and first message as one
// item: one round trip of the engine lock and at most one wait for the
// writer rather than two. It takes ownership of b and returns once its
// HEADERS are out and only window holds b back (ReturnHeadersOut).
func HeadersDataItem(fields []hpack.HeaderField, b *bufpool.Buffer, end bool) SendItem {
	return SendItem{Parts: PartHeaders | PartData, Headers: fields, Data: b, End: end, Return: ReturnHeadersOut}
}

// ResponseItem is a whole unary response, headers, message and trailers, as
// one item, whose sender waits for the writer at most once. It takes
// ownership of b.
func ResponseItem(fields []hpack.HeaderField, b *bufpool.Buffer, trailers []hpack.HeaderField) SendItem {
	return SendItem{Parts: PartHeaders | PartData | PartTrailers, Headers: fields, Data: b, Trailers: trailers, End: true}
}

// ends reports whether the item ends the stream.
func (it *SendItem) ends() bool { return it.End || it.Parts&PartTrailers != 0 }

// free frees the item's data, for a send that is refused.
func (it *SendItem) free() {
	if it.Data != nil {
		it.Data.Free() // the item's reference: the send is refused
		it.Data = nil
	}
}

// dataLen is how many DATA bytes the item carries.
func (it *SendItem) dataLen() int64 {
	if it.Data == nil {
		return 0
	}
	return int64(it.Data.Len())
}

// slotState is who waits for the item in a stream's send slot (see the
// diagram above).
type slotState uint8

const (
	slotEmpty slotState = iota
	slotQueued
	slotDetached
	slotOrphan
	slotDone
	numSlotStates
)

var slotStateNames = [...]string{"empty", "queued", "detached", "orphan", "done"}

func (st slotState) String() string {
	if int(st) < len(slotStateNames) {
		return slotStateNames[st]
	}
	return "slot?"
}

// slotEvent is one move of the send slot.
type slotEvent uint8

const (
	// evQueue: Send puts its item in the empty slot.
	evQueue slotEvent = iota
	// evDetach: the item's sender returns before it is encoded.
	evDetach
	// evAttach: a Send or a Release waits for a detached item.
	evAttach
	// evOrphan: Release leaves a detached item that ends the stream to
	// the writer.
	evOrphan
	// evComplete: the writer encoded the item's last frame, or it failed.
	evComplete
	// evCollect: the sender (or the next Send or Release) takes the
	// outcome.
	evCollect
	numSlotEvents
)

var slotEventNames = [...]string{"queue", "detach", "attach", "orphan", "complete", "collect"}

func (ev slotEvent) String() string {
	if int(ev) < len(slotEventNames) {
		return slotEventNames[ev]
	}
	return "event?"
}

// on returns the state event ev leads to from st, and false when the
// diagram has no such move (st is returned unchanged).
func (st slotState) on(ev slotEvent) (slotState, bool) {
	switch {
	case st == slotEmpty && ev == evQueue:
		return slotQueued, true
	case st == slotQueued && ev == evDetach:
		return slotDetached, true
	case st == slotDetached && ev == evAttach:
		return slotQueued, true
	case st == slotDetached && ev == evOrphan:
		return slotOrphan, true
	case (st == slotQueued || st == slotDetached) && ev == evComplete:
		return slotDone, true
	case st == slotOrphan && ev == evComplete:
		return slotEmpty, true // nobody takes an orphan's outcome
	case st == slotDone && ev == evCollect:
		return slotEmpty, true
	}
	return st, false
}

// sendSlot is a stream's send side. Guarded by conn.mu.
type sendSlot struct {
	item   SendItem // while state is queued, detached or orphan; its flags stay until collect
	off    int      // bytes of item.Data encoded
	result error    // the outcome, while state is done
	// copies holds the stream's own copies of a detached item's fields,
	// kept with the stream for reuse.
	copies []hpack.HeaderField
	state  slotState
	// phase is the part of the item the writer encodes next.
	phase Parts
	// sender is set while a goroutine is inside Send (or a Release waits
	// for a detached item), from its checks to its return: another Send
	// meanwhile is misuse and fails with ErrConcurrentWrite, rather than
	// cut the first one's frames short on the wire.
	sender bool
	// parked: the goroutine waiting for the item is parked on sendCh.
	parked bool
	// handoff: the parked sender was handed the write role.
	handoff bool
	// headersSent: the stream's HEADERS are encoded.
	headersSent bool
	// ended: an item that ends the stream was queued.
	ended bool
}

// to applies ev. An event the diagram does not allow is an engine bug: it
// leaves the state as it is (and panics under the leangrpcdebug tag).
func (sl *sendSlot) to(ev slotEvent) {
	next, ok := sl.state.on(ev)
	if !ok && debugChecks {
		panic(fmt.Sprintf("h2conn: send slot: %v in state %v", ev, sl.state))
	}
	sl.state = next
}

// pending reports whether an item waits to be encoded.
func (sl *sendSlot) pending() bool {
	return sl.state == slotQueued || sl.state == slotDetached || sl.state == slotOrphan
}

// firstPart returns the first of parts, in wire order.
func firstPart(parts Parts) Parts { return parts & -parts }

// queue puts it in the empty slot.
func (sl *sendSlot) queue(it SendItem) {
	sl.to(evQueue)
	if it.ends() {
		// Nothing of the stream follows an item that ends it: its frames
		// must not wait for a next item.
		it.Hold = false
		sl.ended = true
	}
	sl.item, sl.off, sl.result = it, 0, nil
	sl.phase = firstPart(it.Parts)
}

// detach lets the sender of the queued item return, copying the fields it
// borrowed into the stream's own memory when they are still to be
// encoded.
func (sl *sendSlot) detach() {
	it := &sl.item
	if sl.phase == PartHeaders || it.Parts&PartTrailers != 0 {
		h, t := 0, 0
		if sl.phase == PartHeaders {
			h = len(it.Headers)
		}
		if it.Parts&PartTrailers != 0 {
			t = len(it.Trailers)
		}
		sl.copies = append(sl.copies[:0], it.Headers[:h]...)
		sl.copies = append(sl.copies, it.Trailers[:t]...)
		it.Headers = sl.copies[:h:h]
		it.Trailers = sl.copies[h : h+t : h+t]
	}
	sl.to(evDetach)
}

// attach makes the caller the waiter of a detached item, which it waits
// for whole.
func (sl *sendSlot) attach() {
	sl.to(evAttach)
	sl.item.Return = ReturnEncoded
}

// joinable reports whether a DATA item may join the item in the slot
// rather than wait for it: a detached HEADERS not yet encoded that do not
// end the stream (a unary request's, NewStream's), so that the request's
// HEADERS and message leave as one item.
func (sl *sendSlot) joinable() bool {
	return sl.state == slotDetached && sl.phase == PartHeaders && sl.item.Parts == PartHeaders && !sl.item.End
}

// join adds the DATA item it to the detached HEADERS in the slot.
func (sl *sendSlot) join(it SendItem) {
	sl.item.Parts |= PartData
	sl.item.Data, sl.item.End, sl.item.Hold = it.Data, it.End, it.Hold && !it.End
	sl.item.Return = it.Return
	if it.End {
		sl.ended = true
	}
}

// complete ends the item with err as its outcome (nil: it is out), freeing
// what is left of it; the fields' flags stay for the writer (Hold) until
// collect.
func (sl *sendSlot) complete(err error) {
	sl.item.free()
	sl.item.Headers, sl.item.Trailers = nil, nil
	sl.phase = 0
	sl.result = err
	sl.to(evComplete)
}

// collect takes the outcome of a done item and empties the slot.
func (sl *sendSlot) collect() error {
	err := sl.result
	sl.to(evCollect)
	sl.item, sl.result, sl.off = SendItem{}, nil, 0
	return err
}

// nextPart returns the part after the current phase, or 0.
func (sl *sendSlot) nextPart() Parts {
	rest := sl.item.Parts &^ (sl.phase | (sl.phase - 1))
	return firstPart(rest)
}
