package cronjob

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule is a parsed cron schedule: the five standard fields (minute, hour, day of
// month, month, day of week), or a macro. It is small on purpose, written here rather
// than imported (robfig/cron in the tutorial) so that the module gains no dependency:
// numbers, *, ranges a-b, steps */n, a-b/n and a/n, lists, and @yearly (@annually),
// @monthly, @weekly, @daily (@midnight), @hourly and "@every <duration>". No seconds
// field and no month or weekday names. Times are computed in the location of the time
// given to Next.
type Schedule struct {
	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	// domStar and dowStar say that the day field was "*": as in cron, a day matches when
	// both day fields match if either is "*", and when either matches otherwise.
	domStar, dowStar bool
	every            time.Duration // "@every": a constant delay, not the fields
}

var macros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// fields are the five fields' bounds.
var fields = [5]struct {
	name     string
	min, max int
}{{"minute", 0, 59}, {"hour", 0, 23}, {"day of month", 1, 31}, {"month", 1, 12}, {"day of week", 0, 7}}

// ParseSchedule parses a cron schedule.
func ParseSchedule(spec string) (*Schedule, error) {
	spec = strings.TrimSpace(spec)
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < time.Second {
			return nil, fmt.Errorf("schedule %q: @every needs a duration of a second or more", spec)
		}
		return &Schedule{every: every}, nil
	}
	if strings.HasPrefix(spec, "@") {
		m, ok := macros[spec]
		if !ok {
			return nil, fmt.Errorf("schedule %q: unknown macro", spec)
		}
		spec = m
	}
	parts := strings.Fields(spec)
	if len(parts) != len(fields) {
		return nil, fmt.Errorf("schedule %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", spec, len(parts))
	}
	var bits [5]uint64
	for i, part := range parts {
		b, err := parseField(part, fields[i].min, fields[i].max)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %s: %w", spec, fields[i].name, err)
		}
		bits[i] = b
	}
	if bits[4]&(1<<7) != 0 { // 7 is Sunday too
		bits[4] |= 1
	}
	return &Schedule{minute: bits[0], hour: bits[1], dom: bits[2], month: bits[3], dow: bits[4],
		domStar: parts[2] == "*", dowStar: parts[4] == "*"}, nil
}

// parseField parses one field, a list of ranges with optional steps, into its bits.
func parseField(field string, min, max int) (uint64, error) {
	var bits uint64
	for _, item := range strings.Split(field, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			s, err := strconv.Atoi(stepText)
			if err != nil || s < 1 {
				return 0, fmt.Errorf("bad step %q", stepText)
			}
			step = s
		}
		lo, hi := min, max
		if rng != "*" {
			first, last, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = number(first, min, max); err != nil {
				return 0, err
			}
			hi = lo
			switch {
			case isRange:
				if hi, err = number(last, min, max); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("range %q ends before it starts", rng)
				}
			case hasStep: // "a/n" is "a-max/n"
				hi = max
			}
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

func number(s string, min, max int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > max {
		return 0, fmt.Errorf("%q is not a number from %d to %d", s, min, max)
	}
	return n, nil
}

// Next returns the first time after t that the schedule matches, to the minute (for
// "@every", t plus the delay, to the second), or the zero time if none comes within five
// years (February 30th).
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		return t.Truncate(time.Second).Add(s.every)
	}
	loc := t.Location()
	t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), 0, 0, loc).Add(time.Minute)
	for limit := t.AddDate(5, 0, 0); t.Before(limit); {
		switch {
		case s.month&(1<<t.Month()) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, loc)
		case !s.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc)
		case s.hour&(1<<t.Hour()) == 0:
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, loc)
		case s.minute&(1<<t.Minute()) == 0:
			t = t.Add(time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}

func (s *Schedule) dayMatches(t time.Time) bool {
	dom, dow := s.dom&(1<<t.Day()) != 0, s.dow&(1<<t.Weekday()) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}
