package cronjob

import (
	"github.com/typedinformer/typedinformer/typed/crd"
)

// SchedulePattern is what a schedule must match: five space-separated cron
// fields, or a macro such as @daily or "@every 1h".
const SchedulePattern = `^(@(annually|yearly|monthly|weekly|daily|midnight|hourly|reboot)|@every \S+|\S+( +\S+){4})$`

// Definition is the CronJob's custom resource definition: the kubebuilder
// tutorial's markers (a schedule pattern, non-negative deadline and history
// limits, the concurrency policy's default; its enum comes from
// ConcurrencyPolicy.EnumValues), the status subresource (CronJob has a
// status), and the columns kubectl prints.
func Definition() *crd.Definition {
	nonNegative := crd.Minimum(0)
	return &crd.Definition{
		Group: Kind.Group, Kind: Kind.Kind, Plural: Resource.Resource, ShortNames: []string{"cj"},
		Versions: []crd.Version{crd.VersionOf[*CronJob](Kind.Version, crd.Storage(),
			crd.Field(".spec.schedule", crd.Pattern(SchedulePattern)),
			crd.Field(".spec.startingDeadlineSeconds", nonNegative),
			crd.Field(".spec.concurrencyPolicy", crd.Default(AllowConcurrent)),
			crd.Field(".spec.successfulJobsHistoryLimit", nonNegative),
			crd.Field(".spec.failedJobsHistoryLimit", nonNegative),
			crd.Column("Schedule", ".spec.schedule", 0),
			crd.Column("Suspend", ".spec.suspend", 0),
			crd.Column("Last Schedule", ".status.lastScheduleTime", 0),
			crd.Column("Age", ".metadata.creationTimestamp", 0),
		)},
	}
}
