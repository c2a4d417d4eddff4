package h2frame

import (
	"encoding/binary"

	"github.com/leangrpc/leangrpc/internal/hpack"
)

// Header blocks: HEADERS and PUSH_PROMISE with their CONTINUATION frames
// (RFC 9113 §4.3, §6.2, §6.6, §6.10), HPACK decoding under the header list
// limit, and the generic field checks of §8.2.

func (r *Reader) parseHeaders(h FrameHeader, p []byte) (Frame, error) {
	if h.StreamID == 0 {
		return nil, ConnError{ErrCodeProtocol, "headers_stream_0"}
	}
	f := &r.hf
	f.FrameHeader = h
	f.HasPriority = false
	f.Priority = Priority{}
	f.Truncated = false
	f.Invalid = ""
	r.contErr = StreamError{}
	pad := 0
	if h.Flags.Has(FlagPadded) {
		if len(p) < 1 {
			return nil, ConnError{ErrCodeFrameSize, "headers_too_short"}
		}
		pad = int(p[0])
		p = p[1:]
	}
	if h.Flags.Has(FlagPriority) {
		if len(p) < 5 {
			return nil, ConnError{ErrCodeFrameSize, "headers_too_short"}
		}
		f.HasPriority = true
		f.Priority = readPriority(p)
		p = p[5:]
		if f.Priority.StreamDep == h.StreamID {
			// Decode the block anyway so that HPACK state stays in
			// sync, then report the stream error (RFC 9113 §5.3.1).
			r.contErr = StreamError{h.StreamID, ErrCodeProtocol, "headers_self_dependency"}
		}
	}
	if pad > len(p) {
		return nil, ConnError{ErrCodeProtocol, "headers_pad_too_long"}
	}
	p = p[:len(p)-pad]
	r.contPush = false
	return r.startBlock(h, p)
}

func (r *Reader) parsePushPromise(h FrameHeader, p []byte) (Frame, error) {
	if h.StreamID == 0 {
		return nil, ConnError{ErrCodeProtocol, "push_promise_stream_0"}
	}
	pad := 0
	if h.Flags.Has(FlagPadded) {
		if len(p) < 1 {
			return nil, ConnError{ErrCodeFrameSize, "push_promise_too_short"}
		}
		pad = int(p[0])
		p = p[1:]
	}
	if len(p) < 4 {
		return nil, ConnError{ErrCodeFrameSize, "push_promise_too_short"}
	}
	f := &r.ppf
	f.FrameHeader = h
	f.PromisedID = binary.BigEndian.Uint32(p) & (1<<31 - 1)
	p = p[4:]
	if pad > len(p) {
		return nil, ConnError{ErrCodeProtocol, "push_promise_pad_too_long"}
	}
	p = p[:len(p)-pad]
	r.contErr = StreamError{}
	r.contPush = true
	return r.startBlock(h, p)
}

// startBlock decodes a one-frame header block in place, or starts
// accumulating fragments until END_HEADERS.
func (r *Reader) startBlock(h FrameHeader, frag []byte) (Frame, error) {
	if h.Flags.Has(FlagEndHeaders) {
		return r.finishBlock(frag)
	}
	if len(frag) > r.blockCap() {
		return nil, ConnError{ErrCodeEnhanceYourCalm, "header_block_too_large"}
	}
	r.contStream = h.StreamID
	r.contCount = 0
	r.blockLen = 0
	if err := r.appendBlock(frag); err != nil {
		return nil, err
	}
	return nil, nil
}

func (r *Reader) parseContinuation(h FrameHeader, p []byte) (Frame, error) {
	if r.contStream == 0 {
		// readOne already refused a CONTINUATION for another stream while
		// a block is open; this one follows no open block at all.
		return nil, ConnError{ErrCodeProtocol, "continuation_unexpected"}
	}
	r.contCount++
	capBytes := r.blockCap()
	if r.contCount > 8+capBytes/continuationBytesPerFrame {
		return nil, ConnError{ErrCodeEnhanceYourCalm, "continuation_flood"}
	}
	if r.blockLen+len(p) > capBytes {
		return nil, ConnError{ErrCodeEnhanceYourCalm, "header_block_too_large"}
	}
	if err := r.appendBlock(p); err != nil {
		return nil, err
	}
	if !h.Flags.Has(FlagEndHeaders) {
		return nil, nil
	}
	r.contStream = 0
	f, err := r.finishBlock(r.block.Bytes()[:r.blockLen])
	// The block buffer is not kept between blocks: multi-frame header
	// blocks are rare and an idle connection should hold nothing.
	r.freeBlock()
	return f, err
}

// blockCap is the largest encoded header block accepted (limits.go).
func (r *Reader) blockCap() int { return int(r.maxList) + headerBlockSlack }

// appendBlock appends a fragment to the header block being reassembled,
// growing the pooled block buffer by doubling. The buffer's capacity is
// charged to the connection's ledger; growth past the Reader's share is
// refused while the ledger's account is under pressure (limits.go).
func (r *Reader) appendBlock(p []byte) error {
	need := r.blockLen + len(p)
	if r.block == nil || r.block.Cap() < need {
		size := max(need, 2*r.blockLen, 4096)
		// Charge the growth before taking the buffer, so that readers
		// growing at once cannot all pass the check on the same sum. The
		// block cap counts the sizes asked for (blockCharged); the
		// pool's rounding up is charged to the ledger alone.
		if !r.ledger.ChargeBlock(int64(r.blockCharged), int64(size), headerBlockShare) {
			return ConnError{ErrCodeEnhanceYourCalm, "header_blocks_in_flight"}
		}
		nb := r.pool.Get(size)
		nb.SetLen(nb.Cap())
		r.ledger.Charge(int64(nb.Cap() - size))
		if r.block != nil {
			copy(nb.Bytes(), r.block.Bytes()[:r.blockLen])
			r.ledger.Release(int64(r.block.Cap() - r.blockCharged))
			r.block.Free()
		}
		r.block, r.blockCharged = nb, size
	}
	if r.block.Len() != r.block.Cap() {
		r.block.SetLen(r.block.Cap())
	}
	copy(r.block.Bytes()[r.blockLen:], p)
	r.blockLen = need
	return nil
}

// freeBlock frees the block buffer, if any, and takes it off the ledger.
func (r *Reader) freeBlock() {
	if r.block != nil {
		r.ledger.ReleaseBlock(int64(r.blockCharged), headerBlockShare)
		r.ledger.Release(int64(r.block.Cap() - r.blockCharged))
		r.block.Free()
		r.block = nil
	}
	r.blockLen, r.blockCharged = 0, 0
}

// finishBlock decodes a complete header block and returns the frame it
// belongs to, or the stream error found in its first frame.
func (r *Reader) finishBlock(block []byte) (Frame, error) {
	if r.contPush {
		r.discarding = true
		_, err := r.decodeBlock(block)
		r.discarding = false
		if err != nil && err != hpack.ErrListTooLarge {
			return nil, ConnError{ErrCodeCompression, "hpack_decode"}
		}
		r.ppf.Flags |= FlagEndHeaders
		return &r.ppf, nil
	}
	f := &r.hf
	if cap(f.Fields) > maxRetainedFields {
		f.Fields = nil // one huge list should not pin memory for good
	}
	clear(f.Fields) // drop references to the last block's strings
	f.Fields = f.Fields[:0]
	invalid, replayed := r.replayBlock(block, f)
	if !replayed {
		changed, err := r.decodeBlock(block)
		if err == hpack.ErrListTooLarge {
			f.Truncated = true
		} else if err != nil {
			return nil, ConnError{ErrCodeCompression, "hpack_decode"}
		}
		invalid = checkFields(f.Fields)
		if err == nil && !changed {
			r.rememberBlock(block, f.Fields, invalid)
		}
	}
	f.Flags |= FlagEndHeaders
	if r.contErr.StreamID != 0 {
		se := r.contErr
		r.contErr = StreamError{}
		return nil, se
	}
	f.Invalid = invalid
	return f, nil
}

// emit is the HPACK decoder's callback; framesPool stores it as emitFn.
func (fr *frames) emit(hf hpack.HeaderField) {
	if !fr.discarding {
		fr.hf.Fields = append(fr.hf.Fields, hf)
	}
}

// Pseudo-header bits for duplicate detection.
const (
	pseudoMethod = 1 << iota
	pseudoScheme
	pseudoAuthority
	pseudoPath
	pseudoProtocol
	pseudoStatus
)

// checkFields applies the role-independent rules of RFC 9113 §8.2 and §8.3
// and returns the token of the first one broken, or "".
func checkFields(fields []hpack.HeaderField) string {
	seen := 0
	regular := false
	for i := range fields {
		name, value := fields[i].Name, fields[i].Value
		if len(name) == 0 {
			return "empty_name"
		}
		if name[0] == ':' {
			if regular {
				return "pseudo_after_regular"
			}
			bit := 0
			switch name {
			case ":method":
				bit = pseudoMethod
			case ":scheme":
				bit = pseudoScheme
			case ":authority":
				bit = pseudoAuthority
			case ":path":
				bit = pseudoPath
			case ":protocol":
				bit = pseudoProtocol
			case ":status":
				bit = pseudoStatus
			default:
				return "unknown_pseudo"
			}
			if seen&bit != 0 {
				return "duplicate_pseudo"
			}
			seen |= bit
		} else {
			regular = true
			if bad := checkName(name); bad != "" {
				return bad
			}
			switch name {
			case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
				return "connection_header"
			case "te":
				if value != "trailers" {
					return "te_not_trailers"
				}
			}
		}
		if !validValue(value) {
			return "invalid_value"
		}
	}
	return ""
}

// checkName checks a regular field name against RFC 9113 §8.2.1: no
// uppercase letters, no controls, space, DEL, bytes over 0x7f or colons.
func checkName(name string) string {
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z':
			return "uppercase_name"
		case c <= 0x20 || c >= 0x7f || c == ':':
			return "invalid_name"
		}
	}
	return ""
}

// validValue checks a field value against RFC 9113 §8.2.1: no NUL, CR or
// LF, and no leading or trailing space or tab.
func validValue(v string) bool {
	if len(v) == 0 {
		return true
	}
	if c := v[0]; c == ' ' || c == '\t' {
		return false
	}
	if c := v[len(v)-1]; c == ' ' || c == '\t' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == 0 || c == '\n' || c == '\r' {
			return false
		}
	}
	return true
}
