package amqpconn

import (
	"net/url"
	"strings"
)

// Redact returns rawURL with its password, if any, replaced by "xxxxx", for errors and logs; each
// URL's of a list (SplitURLs). A URL
// that cannot be parsed is redacted by its text: everything between "user:" and the last "@" of
// the authority goes.
func Redact(rawURL string) string {
	if urls := SplitURLs(rawURL); len(urls) > 1 {
		for i, u := range urls {
			urls[i] = Redact(u)
		}
		return strings.Join(urls, ",")
	}
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	start, end, ok := passwordSpan(rawURL)
	if !ok {
		return rawURL
	}
	return rawURL[:start] + "xxxxx" + rawURL[end:]
}

// passwordSpan finds the password in the text of a URL: after "scheme://user:" and before the
// last "@" of the authority.
func passwordSpan(rawURL string) (start, end int, ok bool) {
	scheme := strings.Index(rawURL, "://")
	if scheme < 0 {
		return 0, 0, false
	}
	authStart := scheme + 3
	authority := rawURL[authStart:]
	if slash := strings.IndexAny(authority, "/?#"); slash >= 0 {
		// A '/' inside an unencoded password ends the authority early; take the last '@' anyway.
		if at := strings.LastIndex(authority, "@"); at > slash {
			authority = authority[:at+1]
		} else {
			authority = authority[:slash]
		}
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.Index(authority[:at], ":")
	if colon < 0 {
		return 0, 0, false
	}
	return authStart + colon + 1, authStart + at, true
}

// RedactError hides rawURL's password in err's text (url.Parse and dial errors may quote the URL)
// and keeps err for errors.Is and errors.As.
func RedactError(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	var secrets []string
	if urls := SplitURLs(rawURL); len(urls) > 1 {
		for _, u := range urls {
			if r, ok := RedactError(err, u).(*redactedError); ok {
				secrets = append(secrets, r.secrets...)
			}
		}
		if len(secrets) == 0 {
			return err
		}
		return &redactedError{err: err, secrets: secrets}
	}
	if start, end, ok := passwordSpan(rawURL); ok && end > start {
		password := rawURL[start:end]
		secrets = append(secrets, password)
		// url.Parse quotes an unparsable URL only up to a '#' or '?' in an unencoded password.
		if cut := strings.IndexAny(password, "#?/"); cut > 0 {
			secrets = append(secrets, password[:cut])
		}
	}
	if u, perr := url.Parse(rawURL); perr == nil && u.User != nil {
		if p, set := u.User.Password(); set && p != "" {
			secrets = append(secrets, p)
		}
	}
	if len(secrets) == 0 {
		return err
	}
	return &redactedError{err: err, secrets: secrets}
}

type redactedError struct {
	err     error
	secrets []string
}

func (e *redactedError) Error() string {
	s := e.err.Error()
	for _, secret := range e.secrets {
		s = strings.ReplaceAll(s, secret, "xxxxx")
	}
	return s
}

func (e *redactedError) Unwrap() error { return e.err }
