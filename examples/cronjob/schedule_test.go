package cronjob_test

import (
	"testing"
	"time"

	"github.com/typedinformer/typedinformer/examples/cronjob"
)

func TestScheduleNext(t *testing.T) {
	// Wednesday 2026-01-14 10:17:30 UTC.
	from := time.Date(2026, 1, 14, 10, 17, 30, 0, time.UTC)
	at := func(s string) time.Time {
		tm, err := time.Parse("2006-01-02 15:04:05", s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		spec string
		want []string // the next times after from, each after the one before
	}{
		{"* * * * *", []string{"2026-01-14 10:18:00", "2026-01-14 10:19:00"}},
		{"*/1 * * * *", []string{"2026-01-14 10:18:00"}},
		{"*/15 * * * *", []string{"2026-01-14 10:30:00", "2026-01-14 10:45:00", "2026-01-14 11:00:00"}},
		{"5 * * * *", []string{"2026-01-14 11:05:00", "2026-01-14 12:05:00"}},
		{"10-12 * * * *", []string{"2026-01-14 11:10:00", "2026-01-14 11:11:00", "2026-01-14 11:12:00", "2026-01-14 12:10:00"}},
		{"0-30/10 9-10 * * *", []string{"2026-01-14 10:20:00", "2026-01-14 10:30:00", "2026-01-15 09:00:00", "2026-01-15 09:10:00"}},
		{"50/5 * * * *", []string{"2026-01-14 10:50:00", "2026-01-14 10:55:00", "2026-01-14 11:50:00"}},
		{"0,20,40 10 * * *", []string{"2026-01-14 10:20:00", "2026-01-14 10:40:00", "2026-01-15 10:00:00"}},
		{"0 0 1,15 * *", []string{"2026-01-15 00:00:00", "2026-02-01 00:00:00"}},
		{"0 0 * * 1-5", []string{"2026-01-15 00:00:00", "2026-01-16 00:00:00", "2026-01-19 00:00:00"}},
		{"0 0 * * 7", []string{"2026-01-18 00:00:00", "2026-01-25 00:00:00"}}, // 7 is Sunday
		// Both day fields restricted: either matches (the 1st, or a Monday).
		{"0 0 1 * 1", []string{"2026-01-19 00:00:00", "2026-01-26 00:00:00", "2026-02-01 00:00:00", "2026-02-02 00:00:00"}},
		{"0 0 29 2 *", []string{"2028-02-29 00:00:00"}},
		{"0 0 30 2 *", []string{"0001-01-01 00:00:00"}}, // never
		{"@hourly", []string{"2026-01-14 11:00:00"}},
		{"@daily", []string{"2026-01-15 00:00:00"}},
		{"@midnight", []string{"2026-01-15 00:00:00"}},
		{"@weekly", []string{"2026-01-18 00:00:00"}},
		{"@monthly", []string{"2026-02-01 00:00:00"}},
		{"@yearly", []string{"2027-01-01 00:00:00"}},
		{"@annually", []string{"2027-01-01 00:00:00"}},
		{"@every 90s", []string{"2026-01-14 10:19:00", "2026-01-14 10:20:30"}},
	} {
		s, err := cronjob.ParseSchedule(tc.spec)
		if err != nil {
			t.Errorf("ParseSchedule(%q): %v", tc.spec, err)
			continue
		}
		prev := from
		for _, w := range tc.want {
			got := s.Next(prev)
			if !got.Equal(at(w)) {
				t.Errorf("%q: Next(%s) = %s; want %s", tc.spec, prev.Format(time.DateTime), got.Format(time.DateTime), w)
				break
			}
			prev = got
		}
	}
}

func TestParseScheduleRefusesWhatCronRefuses(t *testing.T) {
	for _, spec := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 13 *", "* * * * 8",
		"5-1 * * * *", "*/0 * * * *", "*/x * * * *", "a * * * *", "1,,2 * * * *", "@often", "@every 0s", "@every soon", "* * * JAN *",
	} {
		if s, err := cronjob.ParseSchedule(spec); err == nil {
			t.Errorf("ParseSchedule(%q) = %+v; want an error", spec, s)
		}
	}
}
