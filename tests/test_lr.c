/* test_lr.c - the learning rate per step (train.lr_schedule, warm-up) and
 * the gradient clipping factor (trainer.h), against values worked out by
 * hand from the definitions in docs/training.md. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/config.h"
#include "stages/trainer.h"

static struct config base(void)
{
    struct config c;
    config_defaults(&c);
    c.train.lr = 0.01;
    c.train.epochs = 4;
    return c;
}

#define NEAR(a, b) assert_true(fabs((a) - (b)) <= 1e-15 * fabs(b) + 1e-18)

static void test_constant(void **state)
{
    (void)state;
    struct config c = base();
    for (uint64_t i = 0; i < 100; i++)
        assert_true(trainer_lr_at(&c, i, 10) == 0.01);
    /* a warm-up: (i + 1) / W of the rate, then the rate */
    c.train.warmup_steps = 4;
    NEAR(trainer_lr_at(&c, 0, 10), 0.0025);
    NEAR(trainer_lr_at(&c, 1, 10), 0.005);
    NEAR(trainer_lr_at(&c, 3, 10), 0.01);
    assert_true(trainer_lr_at(&c, 4, 10) == 0.01);
}

static void test_step(void **state)
{
    (void)state;
    struct config c = base();
    c.train.lr_schedule = LR_STEP;
    c.train.lr_step_epochs = 2;
    c.train.lr_gamma = 0.5;
    /* 10 steps per epoch: epochs 0-1 at lr, 2-3 at lr/2, 4-5 at lr/4 */
    assert_true(trainer_lr_at(&c, 0, 10) == 0.01);
    assert_true(trainer_lr_at(&c, 19, 10) == 0.01);
    NEAR(trainer_lr_at(&c, 20, 10), 0.005);
    NEAR(trainer_lr_at(&c, 39, 10), 0.005);
    NEAR(trainer_lr_at(&c, 40, 10), 0.0025);
    c.train.lr_gamma = 0;
    assert_true(trainer_lr_at(&c, 20, 10) == 0.0);
}

static void test_cosine(void **state)
{
    (void)state;
    struct config c = base(); /* 4 epochs x 10 steps = 40 steps */
    c.train.lr_schedule = LR_COSINE;
    c.train.lr_min = 0.001;
    assert_true(trainer_lr_at(&c, 0, 10) == 0.01);
    NEAR(trainer_lr_at(&c, 20, 10), 0.001 + 0.009 * 0.5); /* half way: the mean */
    NEAR(trainer_lr_at(&c, 10, 10), 0.001 + 0.009 * (1 + cos(M_PI / 4)) / 2);
    NEAR(trainer_lr_at(&c, 39, 10), 0.001 + 0.009 * (1 + cos(M_PI * 39 / 40)) / 2);
    NEAR(trainer_lr_at(&c, 40, 10), 0.001); /* past the end: the floor */
    NEAR(trainer_lr_at(&c, 1000, 10), 0.001);
    /* monotone non-increasing over the run */
    for (uint64_t i = 1; i < 40; i++)
        assert_true(trainer_lr_at(&c, i, 10) <= trainer_lr_at(&c, i - 1, 10));
    /* with a warm-up of 8: linear to lr, then the cosine over 32 steps */
    c.train.warmup_steps = 8;
    NEAR(trainer_lr_at(&c, 0, 10), 0.01 / 8);
    NEAR(trainer_lr_at(&c, 7, 10), 0.01);
    assert_true(trainer_lr_at(&c, 8, 10) == 0.01);
    NEAR(trainer_lr_at(&c, 24, 10), 0.001 + 0.009 * 0.5);
    /* a warm-up longer than the run: only the warm-up */
    c.train.warmup_steps = 100;
    NEAR(trainer_lr_at(&c, 49, 10), 0.01 * 50 / 100);
}

static void test_clip(void **state)
{
    (void)state;
    struct config c = base();
    assert_true(trainer_clip_factor(&c, 1e30) == 1.0); /* off */
    c.train.grad_clip = 2.0;
    assert_true(trainer_clip_factor(&c, 1.5) == 1.0);
    assert_true(trainer_clip_factor(&c, 2.0) == 1.0);
    NEAR(trainer_clip_factor(&c, 4.0), 2.0 / (4.0 + 1e-6));
    assert_true(trainer_clip_factor(&c, INFINITY) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant),
        cmocka_unit_test(test_step),
        cmocka_unit_test(test_cosine),
        cmocka_unit_test(test_clip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
