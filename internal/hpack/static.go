package hpack

// staticTable is RFC 7541 Appendix A; index 0 is unused so that the slice
// index is the HPACK index.
var staticTable = [...]HeaderField{
	{},
	{Name: ":authority"},
	{Name: ":method", Value: "GET"},
	{Name: ":method", Value: "POST"},
	{Name: ":path", Value: "/"},
	{Name: ":path", Value: "/index.html"},
	{Name: ":scheme", Value: "http"},
	{Name: ":scheme", Value: "https"},
	{Name: ":status", Value: "200"},
	{Name: ":status", Value: "204"},
	{Name: ":status", Value: "206"},
	{Name: ":status", Value: "304"},
	{Name: ":status", Value: "400"},
	{Name: ":status", Value: "404"},
	{Name: ":status", Value: "500"},
	{Name: "accept-charset"},
	{Name: "accept-encoding", Value: "gzip, deflate"},
	{Name: "accept-language"},
	{Name: "accept-ranges"},
	{Name: "accept"},
	{Name: "access-control-allow-origin"},
	{Name: "age"},
	{Name: "allow"},
	{Name: "authorization"},
	{Name: "cache-control"},
	{Name: "content-disposition"},
	{Name: "content-encoding"},
	{Name: "content-language"},
	{Name: "content-length"},
	{Name: "content-location"},
	{Name: "content-range"},
	{Name: "content-type"},
	{Name: "cookie"},
	{Name: "date"},
	{Name: "etag"},
	{Name: "expect"},
	{Name: "expires"},
	{Name: "from"},
	{Name: "host"},
	{Name: "if-match"},
	{Name: "if-modified-since"},
	{Name: "if-none-match"},
	{Name: "if-range"},
	{Name: "if-unmodified-since"},
	{Name: "last-modified"},
	{Name: "link"},
	{Name: "location"},
	{Name: "max-forwards"},
	{Name: "proxy-authenticate"},
	{Name: "proxy-authorization"},
	{Name: "range"},
	{Name: "referer"},
	{Name: "refresh"},
	{Name: "retry-after"},
	{Name: "server"},
	{Name: "set-cookie"},
	{Name: "strict-transport-security"},
	{Name: "transfer-encoding"},
	{Name: "user-agent"},
	{Name: "vary"},
	{Name: "via"},
	{Name: "www-authenticate"},
}

// staticLen is the number of entries of the static table (61); dynamic
// table indices start right after it.
const staticLen = len(staticTable) - 1

// staticSpan locates the run of static entries sharing one name: entries
// first..first+count-1 (the table keeps equal names adjacent).
type staticSpan struct{ first, count uint8 }

// staticByName maps each static name to its span; built once at init and
// read-only afterwards.
var staticByName = func() map[string]staticSpan {
	m := make(map[string]staticSpan, staticLen)
	for i := 1; i <= staticLen; i++ {
		n := staticTable[i].Name
		if s, ok := m[n]; ok {
			s.count++
			m[n] = s
			continue
		}
		m[n] = staticSpan{first: uint8(i), count: 1}
	}
	return m
}()

// searchStatic returns the static index of an exact match (exact true), or
// of the first entry with the same name (exact false), or 0.
func searchStatic(name, value string) (idx int, exact bool) {
	s, ok := staticByName[name]
	if !ok {
		return 0, false
	}
	for i := int(s.first); i < int(s.first)+int(s.count); i++ {
		if staticTable[i].Value == value {
			return i, true
		}
	}
	return int(s.first), false
}
