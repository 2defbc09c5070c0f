package plugin

import "strings"

// maxDecodeRounds bounds the percent-decoding rounds of cleanPath.
const maxDecodeRounds = 4

// cleanPath returns the request path as the upstream server routes it, made
// a little coarser so that no spelling of a scheduled path escapes the
// comparison:
//
//   - an absolute-form target (http://host/path) keeps its path only;
//   - the query string and fragment are dropped;
//   - percent-escapes are decoded, repeatedly, until none is left (vLLM's
//     server decodes once; a proxy in front may decode once more);
//   - a backslash counts as a slash, runs of slashes become one, "." and
//     ".." segments are resolved (RFC 3986 §5.2.4);
//   - a trailing slash is dropped (Starlette redirects /x/ to /x, and the
//     client follows the redirect through the proxy).
//
// The result starts with "/". It allocates only when the path needs one of
// these steps; the common, already clean path is returned as it is.
func cleanPath(p string) string {
	if len(p) == 0 || p[0] != '/' {
		// Not the usual origin form (which starts with its path's "/"):
		// perhaps the absolute form, scheme://authority/path.
		slash := strings.IndexByte(p, '/')
		if slash < 0 {
			slash = len(p)
		}
		if i := strings.Index(p, "://"); i >= 0 && i < slash {
			rest := p[i+3:]
			if j := strings.IndexByte(rest, '/'); j >= 0 {
				p = rest[j:]
			} else {
				p = "/"
			}
		}
	}
	for i := 0; i < len(p); i++ {
		// strings.IndexAny(p, "?#"), without building its byte set.
		if p[i] == '?' || p[i] == '#' {
			p = p[:i]
			break
		}
	}
	if isClean(p) {
		return p
	}
	for round := 0; round < maxDecodeRounds && strings.IndexByte(p, '%') >= 0; round++ {
		d := unescape(p)
		if d == p {
			break
		}
		// A decoded "?" or "#" stays part of the path: the server splits
		// the query off before it decodes.
		p = d
	}
	return dotSegments(p)
}

// isClean reports whether p needs no step of cleanPath: it starts with "/",
// has no escape, backslash, empty, "." or ".." segment, and no trailing
// slash.
func isClean(p string) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	if len(p) == 1 {
		return true
	}
	if p[len(p)-1] == '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%', '\\':
			return false
		case '/':
			if i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.') {
				return false
			}
		}
	}
	return true
}

// unescape decodes every well-formed %XX escape of s; a '%' not followed by
// two hex digits stays as it is (as Python's urllib.parse.unquote does).
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// dotSegments splits p on slashes and backslashes, drops empty and "."
// segments, resolves ".." (never above the root) and joins the rest with
// single slashes after a leading one.
func dotSegments(p string) string {
	segs := make([]string, 0, 8)
	for _, s := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		switch s {
		case ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	return "/" + strings.Join(segs, "/")
}
